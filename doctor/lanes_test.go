package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/guest"
)

// TestCheckLanes lists every lane; against a cached kernel without the xfs
// and btrfs modules those two are not ready and say why, the built-in ext4
// serves ext2/3/4.
func TestCheckLanes(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	dir := filepath.Join(cache, "kernels", "k1", "lib", "modules", "6.1.0-test-cloud-amd64")
	for _, m := range []string{"kernel/fs/fat/vfat.ko", "kernel/fs/exfat/exfat.ko", "kernel/fs/udf/udf.ko", "kernel/fs/overlayfs/overlay.ko"} {
		p := filepath.Join(dir, m)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not an ELF: only its name is read"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lanes := checkLanes(context.Background(), cache)
	if len(lanes) != len(guest.SupportedFS()) {
		t.Fatalf("%d lanes, want one per lane filesystem (%d)", len(lanes), len(guest.SupportedFS()))
	}
	for _, l := range lanes {
		missingModule := l.FS == "xfs" || l.FS == "btrfs"
		switch {
		case l.Family == "":
			t.Errorf("%s: no family", l.FS)
		case missingModule && (l.Ready || !strings.Contains(l.Why, "has no module "+l.FS)):
			t.Errorf("%s: ready %v, why %q: want not ready, naming the missing module", l.FS, l.Ready, l.Why)
		case !missingModule && strings.Contains(l.Why, "module"):
			t.Errorf("%s: why %q: its module is there", l.FS, l.Why)
		case l.Checker == "":
			t.Errorf("%s: no checker column", l.FS)
		}
		t.Logf("%s: ready %v %s (checker %s)", l.FS, l.Ready, l.Why, l.Checker)
	}
}
