package session

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
)

// TestSessionImageKept: the ledger keeps the image a session booted (its
// kernel, flavour and patches) and reads a session without one as nil.
func TestSessionImageKept(t *testing.T) {
	ctx := context.Background()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	patched := &guest.Ref{Key: "k1", KernelVersion: "6.1.0-1-cloud-amd64", Flavor: "cloud",
		Patches: []guest.Input{{Name: "fix.patch", BLAKE3: "ab"}}, Built: []string{"exfat"}}
	for _, tt := range []struct {
		id  string
		img *guest.Ref
	}{{"s-1", patched}, {"s-2", nil}} {
		in := &Info{ID: tt.id, State: StateRunning, Lanes: []Lane{{Name: "ext2", Spec: "ext2", FS: "ext2"}}, Created: time.Now().UTC(), Image: tt.img}
		if err := l.insertSession(ctx, in); err != nil {
			t.Fatal(err)
		}
		got, err := l.session(ctx, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Image, tt.img) {
			t.Errorf("%s: image %+v, want %+v", tt.id, got.Image, tt.img)
		}
	}
}
