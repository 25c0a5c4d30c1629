package patchtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/guest"
)

// ExfatOffByOne makes exfat's getattr report every regular file one byte
// longer than it is (Linux 6.1's fs/exfat/file.c): explored against ext2,
// the first create is a state divergence, "size 0 != 1".
const ExfatOffByOne = `--- a/fs/exfat/file.c
+++ b/fs/exfat/file.c
@@ -240,6 +240,8 @@
 	stat->btime.tv_sec = ei->i_crtime.tv_sec;
 	stat->btime.tv_nsec = ei->i_crtime.tv_nsec;
 	stat->blksize = EXFAT_SB(inode->i_sb)->cluster_size;
+	if (S_ISREG(inode->i_mode))
+		stat->size += 1; /* themis test: off by one */
 	return 0;
 }
 
`

// ExfatPatchName is the patch file's name as an image records it.
const ExfatPatchName = "exfat-off-by-one.patch"

// BuildExfat builds (or finds cached) the cloud image with ExfatOffByOne
// in cacheDir, named name. It skips where the kernel source is not
// installed, except under CI, where that fails.
func BuildExfat(ctx context.Context, t *testing.T, cacheDir, name string) *guest.Image {
	t.Helper()
	patch := filepath.Join(t.TempDir(), ExfatPatchName)
	if err := os.WriteFile(patch, []byte(ExfatOffByOne), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := guest.Build(ctx, guest.Options{CacheDir: cacheDir, Patches: []string{patch}, Name: name, Log: zaptest.NewLogger(t)})
	if err != nil && strings.Contains(err.Error(), "install the Debian package") && os.Getenv("CI") == "" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return img
}
