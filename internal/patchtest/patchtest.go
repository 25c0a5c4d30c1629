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

// ExfatBugOnMkdir makes exfat hit BUG() on a mkdir below the root (Linux
// 6.1's fs/exfat/namei.c): the kernel crashes on a reachable op sequence
// of two ops, mkdir d and mkdir d/e.
const ExfatBugOnMkdir = `--- a/fs/exfat/namei.c
+++ b/fs/exfat/namei.c
@@ -853,6 +853,7 @@
 	loff_t i_pos;
 	int err;
 
+	BUG_ON(dir->i_ino != EXFAT_ROOT_INO); /* themis test: a mkdir below the root crashes */
 	mutex_lock(&EXFAT_SB(sb)->s_lock);
 	exfat_set_volume_dirty(sb);
 	err = exfat_add_entry(dir, dentry->d_name.name, &cdir, TYPE_DIR,
`

// BuildExfat builds (or finds cached) the cloud image with ExfatOffByOne
// in cacheDir, named name. It skips where the kernel source is not
// installed, except under CI, where that fails.
func BuildExfat(ctx context.Context, t *testing.T, cacheDir, name string) *guest.Image {
	t.Helper()
	return Build(ctx, t, cacheDir, name, ExfatPatchName, ExfatOffByOne)
}

// Build builds (or finds cached) the cloud image with the patch text
// (file name file) in cacheDir, named name; it skips as BuildExfat does.
func Build(ctx context.Context, t *testing.T, cacheDir, name, file, text string) *guest.Image {
	t.Helper()
	patch := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(patch, []byte(text), 0o644); err != nil {
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
