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
