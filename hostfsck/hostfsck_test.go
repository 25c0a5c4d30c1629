package hostfsck

import (
	"strings"
	"testing"
)

func TestFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fs, want, err string
	}{
		{"ext2", "e2fsck -fn", ""},
		{"ext4", "e2fsck -fn", ""},
		{"btrfs", "btrfs check --readonly --check-data-csum", ""},
		{"xfs", "xfs_repair -n", ""},
		{"exfat", "fsck.exfat -n", ""},
		{"f2fs", "fsck.f2fs --dry-run", ""},
		{"minix", "fsck.minix -f", ""},
		{"vfat", "", "not supported for vfat"},
		{"udf", "", "not supported for udf"},
	} {
		got, err := For(tt.fs)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("For(%s) = %v, want an error containing %q", tt.fs, err, tt.err)
		case tt.err == "" && (err != nil || got.Name != tt.want):
			t.Errorf("For(%s) = %q, %v, want %q", tt.fs, got.Name, err, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"  short \n", 10, "short"},
		{"abcdef", 3, "abc..."},
		{"abc", 3, "abc"},
	} {
		if got := Truncate([]byte(tt.in), tt.n); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// TestVerdict maps each checker's exit status: the fsck bit set for
// e2fsck, fsck.exfat, fsck.minix and fsck.f2fs (a dry run that finds
// errors exits 4: a not-clean state, not a failed run), xfs_repair's and
// btrfs check's 1.
func TestVerdict(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fs   string
		code int
		out  string
		want Verdict
		err  bool
	}{
		{"ext2", 4, "", Dirty, false},
		{"ext2", 8, "", Broken, false},
		{"exfat", 1, "", Dirty, false},
		{"f2fs", 4, "[FSCK] Bad inode number for '..'", Dirty, false},
		{"f2fs", 8, "", Broken, false},
		{"minix", 4, "", Dirty, false},
		{"xfs", 1, "", Dirty, false},
		{"xfs", 1, "could not find valid secondary superblock", Broken, false},
		{"btrfs", 1, "", Dirty, false},
		{"btrfs", 1, "cannot open file system", Broken, false},
		{"btrfs", 4, "", 0, true},
		{"ext2", 16, "", 0, true},
	} {
		tool, err := For(tt.fs)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := tool.verdict(tt.code, []byte(tt.out))
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("%s exit %d %q: %v, %v; want %v, error %v", tt.fs, tt.code, tt.out, got, err, tt.want, tt.err)
		}
	}
}
