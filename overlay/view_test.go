package overlay

import (
	"bytes"
	"errors"
	"testing"
)

func TestViewAt(t *testing.T) {
	t.Parallel()
	base := bytes.Repeat([]byte{0xaa}, 4*SectorSize)
	d, err := New(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		t.Fatal(err)
	}
	image := func(r interface {
		ReadAt([]byte, int64) (int, error)
	}) []byte {
		t.Helper()
		buf := make([]byte, len(base))
		if _, err := r.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	var snaps [][]byte
	for i := range 3 {
		snaps = append(snaps, image(d)) // the image before layer i's writes
		if _, err := d.WriteAt([]byte{byte(i + 1), byte(i + 1)}, int64(i*SectorSize+SectorSize-1)); err != nil {
			t.Fatal(err)
		}
		d.Push()
	}
	if d.Depth() != 4 {
		t.Fatalf("depth %d", d.Depth())
	}
	for n := 0; n <= 3; n++ {
		v, err := d.ViewAt(n)
		if err != nil {
			t.Fatal(err)
		}
		want := base
		if n > 0 {
			want = image(mustView(t, d, n))
		}
		if n < 3 && !bytes.Equal(image(v), snaps[n]) {
			t.Errorf("view through %d layers differs from the image before layer %d's writes", n, n)
		}
		if !bytes.Equal(image(v), want) {
			t.Errorf("view %d not stable", n)
		}
	}
	if !bytes.Equal(image(mustView(t, d, 4)), image(d)) {
		t.Error("view through all layers differs from the device")
	}
	before := d.Stats()
	image(mustView(t, d, 2))
	if got := d.Stats(); got[0].SectorsRead != before[0].SectorsRead {
		t.Error("a view read moved the counters")
	}
	if _, err := d.ViewAt(5); !errors.Is(err, ErrDepth) {
		t.Errorf("ViewAt past depth: %v", err)
	}
	v := mustView(t, d, 4)
	if err := d.Pop(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrDepth) {
		t.Errorf("read of a view deeper than the device: %v", err)
	}
}

func mustView(t *testing.T, d *Device, n int) *View {
	t.Helper()
	v, err := d.ViewAt(n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestViewHash: a view hashes as the device did when it was the image;
// writes above it leave its hash alone.
func TestViewHash(t *testing.T) {
	t.Parallel()
	base := bytes.Repeat([]byte{0x5a}, 8*SectorSize)
	d, err := New(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte{1}, 3*SectorSize); err != nil {
		t.Fatal(err)
	}
	atCheckpoint, err := d.Hash()
	if err != nil {
		t.Fatal(err)
	}
	d.Push()
	if _, err := d.WriteAt([]byte{2}, 5*SectorSize); err != nil {
		t.Fatal(err)
	}
	now, err := d.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if now == atCheckpoint {
		t.Fatal("the write above the view did not change the device's hash: the test proves nothing")
	}
	tests := []struct {
		name  string
		depth int
		want  [32]byte
	}{
		{"below the top layer", d.Depth() - 1, atCheckpoint},
		{"through every layer", d.Depth(), now},
	}
	for _, tt := range tests {
		got, err := mustView(t, d, tt.depth).Hash()
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: view hash %x, want %x", tt.name, got[:8], tt.want[:8])
		}
	}
}
