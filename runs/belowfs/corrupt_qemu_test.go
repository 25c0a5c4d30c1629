package belowfs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestCorruptRealGuest reproduces the paper's Table 11 on ext2 in the real
// guest: a data bit is silent content damage, an i_size byte silent
// metadata damage, a dirent rec_len loses the directory's children with the
// filesystem still mounted, and the superblock magic makes the mount fail.
// Corrupt itself checks after every target that the restore brought the
// disk hash and fingerprint back to the checkpoint's (an error otherwise).
func TestCorruptRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	got := map[string]CorruptResult{}
	sum, err := Corrupt(ctx, m, CorruptOptions{}, func(r CorruptResult) {
		t.Logf("%-5s %-20s lba %d+%d bit %d %-18s %-26s mounted %v %q -> %-15s affected %v read errno %d fsck clean %v (%s) kmsg %q",
			r.Lane, r.Target, r.LBA, r.Offset, r.Bit, r.Region, r.Field, r.Mounted, r.MountError, r.Class, r.Affected, r.ReadErrno, r.FsckClean, r.FsckSummary, r.KernelLog)
		got[r.Target] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("corrupt: %d results in %s: %v", sum.Results, sum.Elapsed, sum.ByClass)
	for _, c := range []struct {
		target, class string
		affected      []string
		mounted       bool
	}{
		{"data:d/f:0:0", ClassSilentContent, []string{"d/f"}, true},
		{"inode:d/f:i_size", ClassSilentMetadata, []string{"d/f"}, true},
		{"dirent:d:f:rec_len", ClassNamespaceLoss, nil, true},
		{"superblock.magic", ClassFatal, nil, false},
	} {
		r, ok := got[c.target]
		if !ok {
			t.Errorf("%s: no result", c.target)
			continue
		}
		if r.Class != c.class || r.Mounted != c.mounted {
			t.Errorf("%s: class %s, mounted %v; want %s, mounted %v", c.target, r.Class, r.Mounted, c.class, c.mounted)
		}
		for _, p := range c.affected {
			found := false
			for _, a := range r.Affected {
				found = found || a == p
			}
			if !found {
				t.Errorf("%s: affected %v, want %s among them", c.target, r.Affected, p)
			}
		}
	}
	if r := got["superblock.magic"]; r.LBA != 2 || r.Offset != 56 || r.MountError == "" {
		t.Errorf("superblock.magic: %+v, want LBA 2 byte 56 and a mount error", r)
	}
	if r := got["dirent:d:f:rec_len"]; len(r.Affected) == 0 {
		t.Errorf("dirent rec_len: nothing affected")
	}
}

// TestCorruptLanesRealGuest runs the default targets (Table11Targets) on
// ext2, ext4 (metadata_csum), btrfs and xfs side by side in one real
// guest: a flipped data bit is silent on ext2, ext4 and xfs and detected
// on btrfs, whose data checksum makes the read fail with EIO and the
// kernel log a csum failure; btrfs's metadata flips (its inode item, dir
// item and superblock for the ext targets) fail their tree block's or
// superblock's checksum and the mount (one copy: fatal); xfs's refuse the
// inode (EUCLEAN) or the mount.
func TestCorruptLanesRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	got := map[[2]string]CorruptResult{}
	sum, err := Corrupt(ctx, m, CorruptOptions{Lanes: []string{"ext2", "ext4", "btrfs", "xfs"}}, func(r CorruptResult) {
		t.Logf("%-5s %-20s lba %d+%d bit %d %-14s %-40s mounted %v %q -> %-15s affected %v read errno %d fsck clean %v (%s) kmsg %q",
			r.Lane, r.Target, r.LBA, r.Offset, r.Bit, r.Region, r.Field, r.Mounted, r.MountError, r.Class, r.Affected, r.ReadErrno, r.FsckClean, r.FsckSummary, r.KernelLog)
		got[[2]string{r.Lane, r.Target}] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("corrupt: %d results in %s: %v", sum.Results, sum.Elapsed, sum.ByClass)
	if want := 4 * len(Table11Targets); sum.Results != want {
		t.Errorf("%d results, want %d", sum.Results, want)
	}
	for _, lane := range []string{"ext2", "ext4", "xfs"} {
		if r := got[[2]string{lane, "data:d/f:0:0"}]; r.Class != ClassSilentContent || r.ReadErrno != 0 {
			t.Errorf("%s data bit: class %s, read errno %d; want silent-content, 0", lane, r.Class, r.ReadErrno)
		}
		if r := got[[2]string{lane, "superblock.magic"}]; r.Class != ClassFatal {
			t.Errorf("%s superblock.magic: class %s, want fatal", lane, r.Class)
		}
	}
	r := got[[2]string{"btrfs", "data:d/f:0:0"}]
	if r.Class != ClassDetected || r.ReadErrno != errnoEIO || !r.Mounted {
		t.Errorf("btrfs data bit: class %s, read errno %d, mounted %v; want detected, EIO, mounted", r.Class, r.ReadErrno, r.Mounted)
	}
	csum := false
	for _, l := range r.KernelLog {
		csum = csum || strings.Contains(l, "csum failed")
	}
	if !csum || r.FsckClean || r.Region != "data+metadata" {
		t.Errorf("btrfs data bit: kernel log %q (want a csum failure), fsck clean %v (want errors), region %q", r.KernelLog, r.FsckClean, r.Region)
	}
	for _, tg := range Table11Targets[1:] {
		if r := got[[2]string{"btrfs", tg}]; r.Class != ClassFatal || r.Mounted || r.FsckClean || !strings.Contains(r.Field, " as ") {
			t.Errorf("btrfs %s: class %s (%s), mounted %v, fsck clean %v; want fatal, the mapped field flipped", tg, r.Class, r.Field, r.Mounted, r.FsckClean)
		}
	}
	for _, tg := range Table11Targets[1:] {
		r := got[[2]string{"xfs", tg}]
		refused := r.Class == ClassFatal || (r.Class == ClassNamespaceLoss && r.ReadErrno == errnoEUCLEAN)
		if !refused || r.FsckClean || r.FsckTool != "xfs_repair -n" || !strings.Contains(r.Field, " as ") {
			t.Errorf("xfs %s: class %s (%s), read errno %d, fsck %q clean %v; want refused, reported by xfs_repair", tg, r.Class, r.Field, r.ReadErrno, r.FsckTool, r.FsckClean)
		}
	}
}
