package family

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/oracle"
)

func TestEveryLaneHasAFamily(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, f := range Table {
		for _, fs := range f.FS {
			if prev, dup := seen[fs]; dup {
				t.Errorf("%s is in families %s and %s", fs, prev, f.Name)
			}
			seen[fs] = f.Name
		}
		if f.Mkfs == "" || f.Package == "" || f.Quiesce == "" || f.Time == "" {
			t.Errorf("family %s: a column is empty: %+v", f.Name, f)
		}
		for _, r := range f.Ops {
			if r.Errno <= 0 || (r.Effect != Excluded && r.Effect != Tolerated) || r.Why == "" {
				t.Errorf("family %s: op rule %+v", f.Name, r)
			}
		}
	}
	for _, fs := range guest.SupportedFS() {
		if _, err := Of(fs); err != nil {
			t.Errorf("lane filesystem %s: %v", fs, err)
		}
	}
	if _, err := Of("zfs"); err == nil {
		t.Error("Of(zfs): no error")
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	lanes := func(fs ...string) []Lane {
		var out []Lane
		for _, f := range fs {
			seeded := strings.HasSuffix(f, "+seed")
			f = strings.TrimSuffix(f, "+seed")
			out = append(out, Lane{Name: f, FS: f, Seeded: seeded})
		}
		return out
	}
	metis := oracle.MetisParity
	metis.Name = AutoPolicy
	with := func(edit func(p *oracle.Policy)) oracle.Policy { p := metis; edit(&p); return p }
	for _, tt := range []struct {
		name     string
		lanes    []Lane
		policy   string
		want     oracle.Policy
		excluded []string
		declared map[string]map[string]int32
		reason   string // in Reasons
	}{
		{name: "one lane: Metis's rules only", lanes: lanes("btrfs"), want: metis},
		{name: "ext2 against ext4", lanes: lanes("ext2", "ext4"), want: metis, reason: "lost+found ignored: ext"},
		{name: "btrfs: directory nlink, its name hash's limit", lanes: lanes("ext2", "btrfs"),
			want: with(func(p *oracle.Policy) { p.IgnoreRootNlink, p.IgnoreDirNlink = true, true }), reason: "directory nlink ignored: btrfs",
			excluded: []string{"collide"}},
		{name: "minix: short names", lanes: lanes("ext2", "minix"), want: metis,
			excluded: []string{"collide", "rename_exchange", "rename_whiteout"},
			declared: map[string]map[string]int32{"minix": {"setxattr": 95, "removexattr": 95}}, reason: "collide left out: minix"},
		{name: "xfs: nothing but directory sizes", lanes: lanes("ext2", "xfs"), want: metis},
		{name: "vfat: owners, modes, no links", lanes: lanes("ext2", "vfat"),
			want:     with(func(p *oracle.Policy) { p.IgnoreOwner, p.IgnoreMode = true, true }),
			excluded: []string{"link", "rename_whiteout", "symlink"},
			declared: map[string]map[string]int32{"vfat": {"chmod": 1, "chown": 1, "chgrp": 1, "setxattr": 95, "removexattr": 95}},
			reason:   "symlink left out: vfat"},
		{name: "udf: xattrs, renameat2 noreplace only", lanes: lanes("ext2", "udf"), want: metis, excluded: []string{"rename_exchange", "rename_whiteout"},
			declared: map[string]map[string]int32{"udf": {"setxattr": 95, "removexattr": 95}}, reason: "setxattr errno 95 tolerated: udf"},
		{name: "overlay, empty lower layer", lanes: lanes("ext2", "overlay"), want: with(func(p *oracle.Policy) { p.IgnoreRootNlink = true })},
		{name: "overlay over a seed", lanes: lanes("ext2", "overlay+seed"),
			want: with(func(p *oracle.Policy) { p.IgnoreRootNlink, p.IgnoreDirNlink = true, true })},
		{name: "exact turns it all off", lanes: lanes("ext2", "vfat"), policy: "exact", want: oracle.Exact},
		{name: "a named policy keeps the op rules", lanes: lanes("ext2", "exfat"), policy: "metis", want: oracle.MetisParity,
			excluded: []string{"link", "rename_exchange", "rename_whiteout", "symlink"},
			declared: map[string]map[string]int32{"exfat": {"chmod": 1, "chown": 1, "chgrp": 1, "setxattr": 95, "removexattr": 95}}},
	} {
		j, err := Judge(tt.lanes, tt.policy)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if j.Policy != tt.want {
			t.Errorf("%s: policy %s, want %s", tt.name, j.Policy, tt.want)
		}
		want := tt.excluded
		if len(tt.lanes) > 1 && tt.policy != "exact" {
			// Every family's far sizes rules: no run of two lanes has them.
			want = append(slices.Clone(want), "truncate_far", "write_far")
			slices.Sort(want)
		}
		if !reflect.DeepEqual(j.Excluded, want) {
			t.Errorf("%s: excluded %v, want %v", tt.name, j.Excluded, want)
		}
		if !reflect.DeepEqual(j.Declared, tt.declared) {
			t.Errorf("%s: declared %v, want %v", tt.name, j.Declared, tt.declared)
		}
		if tt.reason != "" && !strings.Contains(j.String(), tt.reason) {
			t.Errorf("%s: no %q in\n%s", tt.name, tt.reason, j)
		}
	}
	if _, err := Judge(lanes("ext2", "zfs"), ""); err == nil || !strings.Contains(err.Error(), "lane zfs") {
		t.Errorf("unknown filesystem: err = %v", err)
	}
	if _, err := Judge(lanes("ext2"), "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown policy: err = %v", err)
	}
}

func TestWithout(t *testing.T) {
	t.Parallel()
	if got := Without([]string{"create_file", "link", "symlink", "mkdir"}, []string{"link", "symlink"}); !reflect.DeepEqual(got, []string{"create_file", "mkdir"}) {
		t.Errorf("Without = %v", got)
	}
}

func TestReference(t *testing.T) {
	for _, tc := range []struct {
		fs, want string
		err      bool
	}{
		{fs: "ext4", want: "xfs"},
		{fs: "ext2", want: "xfs"},
		{fs: "exfat", want: "ext2"},
		{fs: "xfs", want: "ext2"},
		{fs: "overlay", want: "ext2"},
		{fs: "zfs", err: true},
	} {
		got, why, err := Reference(tc.fs)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Reference(%q) = %q, %v; want %q (error %v)", tc.fs, got, err, tc.want, tc.err)
		}
		if err == nil {
			ref, _ := Of(got)
			own, _ := Of(tc.fs)
			if ref.Name == own.Name || why == "" {
				t.Errorf("Reference(%q) = %q (%q): same family %s or no reason", tc.fs, got, why, ref.Name)
			}
		}
	}
}

func TestCrashRepaired(t *testing.T) {
	for _, tc := range []struct {
		fs   string
		want bool
	}{{"ext2", true}, {"vfat", true}, {"exfat", true}, {"minix", true}, {"udf", true},
		{"ext3", false}, {"ext4", false}, {"btrfs", false}, {"xfs", false}, {"f2fs", false}, {"nilfs2", false}} {
		got, why := CrashRepaired(tc.fs)
		if got != tc.want || got != (why != "") {
			t.Errorf("CrashRepaired(%q) = %v, %q; want %v with a reason", tc.fs, got, why, tc.want)
		}
	}
}

func TestFsyncNameless(t *testing.T) {
	for _, tc := range []struct {
		fs   string
		want bool
	}{{"minix", true}, {"ext2", false}, {"ext4", false}, {"vfat", false}, {"exfat", false}, {"udf", false},
		{"btrfs", false}, {"xfs", false}, {"f2fs", false}, {"nilfs2", false}} {
		got, why := FsyncNameless(tc.fs)
		if got != tc.want || got != (why != "") {
			t.Errorf("FsyncNameless(%q) = %v, %q; want %v with a reason", tc.fs, got, why, tc.want)
		}
	}
}
