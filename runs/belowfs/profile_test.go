package belowfs

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/opspec"
)

func TestValidateProfile(t *testing.T) {
	t.Parallel()
	o := ProfileOptions{}
	ops, setup, err := validateProfile(&o)
	if err != nil {
		t.Fatal(err)
	}
	wantSetup := len(DefaultProfileSetup) + len(ProfileTree(DefaultLsFiles, DefaultTreeEntries))
	if len(ops) != len(DefaultProfileOps)+len(DefaultProfileReadOps) || len(setup) != wantSetup || o.Lanes[0] != "ext2" {
		t.Errorf("defaults: %d ops, %d setup, %+v", len(ops), len(setup), o)
	}
	if o.LsFiles != DefaultLsFiles || o.TreeEntries != DefaultTreeEntries {
		t.Errorf("defaults: ls_files %d, tree_entries %d", o.LsFiles, o.TreeEntries)
	}
	walks := 0
	for _, op := range ops {
		if op.kind == walkKind {
			walks++
		}
	}
	if walks != len(DefaultProfileReadOps) {
		t.Errorf("defaults: %d walks, want %d", walks, len(DefaultProfileReadOps))
	}
	for _, c := range []struct {
		o     ProfileOptions
		field string
	}{
		{ProfileOptions{Ops: []string{"chmod f 0600", "bogus"}}, "ops[1]"},
		{ProfileOptions{Ops: []string{"sync"}}, "ops[0]"},
		{ProfileOptions{Ops: []string{"write ../f 0 1"}}, "ops[0]"},
		{ProfileOptions{Lanes: []string{"zfs"}}, "lanes[0]"},
		{ProfileOptions{Setup: []string{"create f", "nope"}}, "setup[1]"},
		{ProfileOptions{MemoryMiB: 1}, "memory_mib"},
		{ProfileOptions{Ops: []string{"ls a b"}}, "ops[0]"},
		{ProfileOptions{Ops: []string{"chmod f 0600", "find ../x"}}, "ops[1].path"},
		{ProfileOptions{Ops: []string{"ls a//b"}}, "ops[0].path"},
		{ProfileOptions{Ops: []string{"ls d", "chmod f"}}, "ops[1]"},
		{ProfileOptions{Setup: []string{"ls d"}}, "setup[0]"},
		{ProfileOptions{LsFiles: -1}, "ls_files"},
		{ProfileOptions{TreeEntries: maxProfileTree + 1}, "tree_entries"},
		{ProfileOptions{Setup: []string{"create f"}, LsFiles: 3}, "ls_files"},
	} {
		_, _, err := validateProfile(&c.o)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("validateProfile(%+v) = %v, want a errkind.FieldError on %s", c.o, err, c.field)
		}
	}
}

func TestTouchedPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"write f 0 1": "f", "create g": "g", "mkdir d": "d", "link f l": "l", "rename f r": "r", "unlink f": "f", "chmod a/b 0600": "a/b",
	} {
		op, err := opspec.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		r, err := opspec.Request(op)
		if err != nil {
			t.Fatal(err)
		}
		if got := touchedPath(r); got != want {
			t.Errorf("touchedPath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := touchedPath(&agentv1.Request{}); got != "" {
		t.Errorf("touchedPath(empty) = %q", got)
	}
}

func TestParseProfileOps(t *testing.T) {
	t.Parallel()
	ops, err := parseProfileOps("ops", []string{"ls dir", "find /", "find", "chmod f 0600", " ls /tree/d0/ "})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind, text, path string
		recursive        bool
	}{
		{walkKind, "ls dir", "dir", false},
		{walkKind, "find /", "", true},
		{walkKind, "find", "", true},
		{"chmod", "chmod f 0600", "f", false},
		{walkKind, "ls /tree/d0/", "tree/d0", false},
	}
	for i, w := range want {
		got := ops[i]
		if got.kind != w.kind || got.text != w.text {
			t.Errorf("ops[%d] = %s %q, want %s %q", i, got.kind, got.text, w.kind, w.text)
		}
		if w.kind != walkKind {
			continue
		}
		if wk := got.req.GetWalk(); wk.GetPath() != w.path || wk.GetRecursive() != w.recursive {
			t.Errorf("ops[%d] walk = %v, want path %q recursive %v", i, wk, w.path, w.recursive)
		}
	}
}

func TestProfileTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		files, entries int
		want           []string
	}{
		{0, 0, []string{"mkdir dir 0755", "mkdir tree 0755"}},
		{2, 3, []string{"mkdir dir 0755", "create dir/f0 0644", "create dir/f1 0644", "mkdir tree 0755",
			"mkdir tree/d0 0755", "create tree/f0 0644", "mkdir tree/d1 0755"}},
		{0, 8, []string{"mkdir dir 0755", "mkdir tree 0755",
			"mkdir tree/d0 0755", "create tree/f0 0644", "mkdir tree/d1 0755", "create tree/f1 0644",
			"mkdir tree/d0/d0 0755", "create tree/d0/f0 0644", "mkdir tree/d0/d1 0755", "create tree/d0/f1 0644"}},
	}
	for _, tt := range tests {
		if got := ProfileTree(tt.files, tt.entries); !slices.Equal(got, tt.want) {
			t.Errorf("ProfileTree(%d, %d) =\n%q\nwant\n%q", tt.files, tt.entries, got, tt.want)
		}
	}
	// The largest tree: every op parses and validates, each parent is made
	// before its children, and it stays shallow.
	ops := ProfileTree(maxProfileTree, maxProfileTree)
	if n := len(ops); n != 2+2*maxProfileTree {
		t.Fatalf("%d ops, want %d", n, 2+2*maxProfileTree)
	}
	parsed, err := parseOps("setup", ops, false)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{"": true}
	deepest := 0
	for _, op := range parsed {
		p := touchedPath(op.req)
		if !made[path.Dir(p)] && path.Dir(p) != "." {
			t.Fatalf("%s before its parent", op.text)
		}
		if op.kind == "mkdir" {
			made[p] = true
		}
		deepest = max(deepest, strings.Count(p, "/"))
	}
	if deepest > 16 {
		t.Errorf("deepest entry %d levels down, want a shallow tree", deepest)
	}
}

func TestSetMinus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ a, b, want []uint64 }{
		{nil, nil, nil},
		{[]uint64{1, 2, 3}, nil, []uint64{1, 2, 3}},
		{[]uint64{1, 2, 3, 9}, []uint64{0, 2, 4, 9}, []uint64{1, 3}},
		{[]uint64{5}, []uint64{5}, nil},
	} {
		if got := setMinus(tt.a, tt.b); !slices.Equal(got, tt.want) {
			t.Errorf("setMinus(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
