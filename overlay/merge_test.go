package overlay

import (
	"bytes"
	"errors"
	"testing"
)

func TestMerge(t *testing.T) {
	t.Parallel()
	base := bytes.Repeat([]byte{0xaa}, 8*SectorSize)
	d, err := New(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		t.Fatal(err)
	}
	write := func(lba int, b byte) {
		t.Helper()
		if _, err := d.WriteAt(bytes.Repeat([]byte{b}, SectorSize), int64(lba)*SectorSize); err != nil {
			t.Fatal(err)
		}
	}
	image := func() []byte {
		t.Helper()
		buf := make([]byte, len(base))
		if _, err := d.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	write(0, 1) // layer 1
	d.Push()
	write(1, 2) // layer 2
	write(0, 3)
	d.Push()
	write(2, 4) // layer 3
	before := image()
	if err := d.Merge(2); err != nil { // fold layer 2 into layer 1
		t.Fatal(err)
	}
	if got := d.Depth(); got != 2 {
		t.Fatalf("depth after merge %d, want 2", got)
	}
	if !bytes.Equal(image(), before) {
		t.Fatal("merge changed the image")
	}
	// Popping the top now returns to layer 1 with layer 2's writes included.
	if err := d.Pop(); err != nil {
		t.Fatal(err)
	}
	got := image()
	if got[0] != 3 || got[SectorSize] != 2 || got[2*SectorSize] != 0xaa {
		t.Errorf("after pop: sectors 0..2 = %x %x %x, want 03 02 aa", got[0], got[SectorSize], got[2*SectorSize])
	}
	for _, bad := range []int{0, 1, 3} {
		if err := d.Merge(bad); !errors.Is(err, ErrDepth) {
			t.Errorf("Merge(%d) with depth %d: %v, want ErrDepth", bad, d.Depth(), err)
		}
	}
}
