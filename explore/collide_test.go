package explore

import (
	"context"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestBtrfsNameHash checks the hash against the name of the 2026 btrfs
// create fix's reproducer, whose crc32c the posting gives (0x1d90c899).
func TestBtrfsNameHash(t *testing.T) {
	if got := BtrfsNameHash("W6tIm-VK2@BGC@IBfcgg6j_p:pxp_QUqtWpGD5Ok_GmijKOJJt"); got != 0x1d90c899 {
		t.Errorf("BtrfsNameHash = %#x, want 0x1d90c899", got)
	}
}

// TestForgeCRC checks that the 4 forged bytes take any register state to
// any target.
func TestForgeCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		state, target := rng.Uint32(), rng.Uint32()
		tail := forgeCRC(state, target)
		// The raw register after tail, from state: Go's Update inverts on
		// the way in and out.
		if got := ^crc32.Update(^state, castagnoli, tail[:]); got != target {
			t.Fatalf("forgeCRC(%#x, %#x) = %x: the register ends at %#x", state, target, tail, got)
		}
	}
}

// TestCollidingNames checks the burst's names: CollideFill+1 of them,
// distinct even without case, collideLen bytes of collideChars, one hash.
func TestCollidingNames(t *testing.T) {
	names := CollidingNames()
	if len(names) != CollideFill+1 {
		t.Fatalf("%d names, want %d", len(names), CollideFill+1)
	}
	seen := map[string]bool{}
	want := BtrfsNameHash(names[0])
	for _, n := range names {
		if len(n) != collideLen || !allIn([]byte(n), collideChars) {
			t.Errorf("%q: want %d bytes of %q", n, collideLen, collideChars)
		}
		if h := BtrfsNameHash(n); h != want {
			t.Errorf("%q: hash %#x, want %#x", n, h, want)
		}
		if seen[strings.ToLower(n)] {
			t.Errorf("%q twice (without case)", n)
		}
		seen[strings.ToLower(n)] = true
		if !IsColliding("d-00/"+n) || IsColliding("d-00/"+n[1:]) {
			t.Errorf("IsColliding wrong for %q", n)
		}
	}
}

// TestCollideBurst checks a burst's ops, their kinds, and that a trace
// holds them expanded.
func TestCollideBurst(t *testing.T) {
	names := CollidingNames()
	for _, last := range collideLast {
		t.Run(last, func(t *testing.T) {
			b := buildCollide("", last, "f-00", 0o644)
			steps := Steps(b)
			if len(steps) != CollideFill+1 || OpKind(b) != OpCollide {
				t.Fatalf("%d steps, kind %q: want %d, %q", len(steps), OpKind(b), CollideFill+1, OpCollide)
			}
			for i, op := range steps {
				if OpKind(op) != OpCollide {
					t.Errorf("step %d: kind %q, want %q", i, OpKind(op), OpCollide)
				}
			}
			if got := opKinds(appendStep([]*agentv1.Request{create("f-00", 0o644)}, b)); len(got) != CollideFill+2 || got[0] != OpCreateFile {
				t.Errorf("trace kinds %v: want create_file then %d of collide", got, CollideFill+1)
			}
			var made string
			switch o := steps[CollideFill].GetOp().(type) {
			case *agentv1.Request_Create:
				made = o.Create.GetPath()
			case *agentv1.Request_Mkdir:
				made = o.Mkdir.GetPath()
			case *agentv1.Request_Rename:
				made = o.Rename.GetNewPath()
			case *agentv1.Request_Link:
				made = o.Link.GetNewPath()
			case *agentv1.Request_Symlink:
				made = o.Symlink.GetPath()
			}
			if made != names[CollideFill] {
				t.Errorf("the last op makes %q, want the last name", made)
			}
		})
	}
	if OpKind(create("f-00", 0o644)) != OpCreateFile {
		t.Error("a plain create is a collide")
	}
}

// TestCollideFinding runs a search with the burst over a lane that refuses
// names past a hash's capacity (as btrfs does) and a correct one: the
// errno divergence is found inside a burst, its trace is plain ops that
// end at the refused create, and it minimizes to the creates it needs.
func TestCollideFinding(t *testing.T) {
	t.Parallel()
	sys := newToy("", "hash-cap")
	c, err := NewChecker(sys, Config{Seed: 1, Depth: 2, Ops: []string{OpCreateFile, OpUnlink, OpCollide}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Findings, func(f Finding) bool { return f.Kind == KindErrno })
	if i < 0 {
		t.Fatalf("no errno finding in %d findings", len(res.Findings))
	}
	f := res.Findings[i]
	kinds := opKinds(f.Trace)
	if slices.Contains(kinds, "") || kinds[len(kinds)-1] != OpCollide {
		t.Errorf("trace kinds %v: want plain ops ending in a collide", kinds)
	}
	if got := f.Lanes[1].Errno; got != eoverflow {
		t.Errorf("errno %d on the capped lane, want %d", got, eoverflow)
	}
	if !f.Minimized || len(f.Trace) != toyHashCap+1 {
		t.Errorf("minimized %v to %d ops, want %d (the cap's creates and one more)", f.Minimized, len(f.Trace), toyHashCap+1)
	}
	if len(res.UniqueByDepth) > 3 {
		t.Errorf("states by depth %v: past the search's depth 2 (a burst is one step)", res.UniqueByDepth)
	}
}

// TestCollideLastKinds checks that a burst ends only in a kind the run
// enables (the family table takes link and symlink out of an exfat run).
func TestCollideLastKinds(t *testing.T) {
	tests := []struct {
		ops  []string
		want []string
	}{
		{[]string{OpCollide}, []string{OpCreateFile}},
		{AllOps, collideLast},
		{[]string{OpCollide, OpLink, OpMkdir}, []string{OpCreateFile, OpMkdir, OpLink}},
		{[]string{OpCollide, OpRename, OpSymlink, OpChmod}, []string{OpCreateFile, OpRename, OpSymlink}},
	}
	for _, tt := range tests {
		g, err := NewMetisGenerator(GenConfig{Ops: tt.ops})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		rng := rand.New(rand.NewPCG(3, 4))
		for range 200 {
			steps := Steps(g.build(rng, OpCollide))
			switch steps[len(steps)-1].GetOp().(type) {
			case *agentv1.Request_Create:
				seen[OpCreateFile] = true
			case *agentv1.Request_Mkdir:
				seen[OpMkdir] = true
			case *agentv1.Request_Rename:
				seen[OpRename] = true
			case *agentv1.Request_Link:
				seen[OpLink] = true
			case *agentv1.Request_Symlink:
				seen[OpSymlink] = true
			}
		}
		var got []string
		for _, k := range collideLast {
			if seen[k] {
				got = append(got, k)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ops %v: bursts end in %v, want %v", tt.ops, got, tt.want)
		}
	}
}

// TestBurstContinues checks which ops of a trace run without a remount
// before them: a burst's after its first, nothing else.
func TestBurstContinues(t *testing.T) {
	trace := appendStep([]*agentv1.Request{create("f-00", 0o644)}, buildCollide("", OpRename, "f-00", 0o644))
	trace = appendStep(trace, buildCollide("", OpCreateFile, "", 0o644)) // a second burst starts afresh
	for i, op := range trace {
		want := i != 0 && i != 1 && i != CollideFill+2
		if got := BurstContinues(op); got != want {
			t.Errorf("op %d (%s): continues a burst %v, want %v", i, OpKind(op), got, want)
		}
	}
}

// TestSharesMount: the ops that run in the mount of the op before are a
// burst's after its first and those marked keep_mount, nothing else.
func TestSharesMount(t *testing.T) {
	t.Parallel()
	burst := Steps(buildCollide("", OpCreateFile, "", 0o644))
	keep := create("f-00", 0o644)
	keep.KeepMount = true
	for _, tt := range []struct {
		name string
		op   *agentv1.Request
		want bool
	}{
		{"plain", create("f-00", 0o644), false},
		{"burst first", burst[0], false},
		{"burst later", burst[1], true},
		{"keep_mount", keep, true},
	} {
		if got := SharesMount(tt.op); got != tt.want {
			t.Errorf("%s: SharesMount = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestCollideDir checks where a state-aware draw puts a burst: in the
// root or a directory that exists, both drawn; a burst's rename takes a
// file of the directory it fills where there is one.
func TestCollideDir(t *testing.T) {
	dir := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_DIRECTORY} }
	file := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_REGULAR} }
	tests := []struct {
		name  string
		state []*agentv1.Entry
		dirs  []string // the directories bursts fill, sorted
		src   map[string]string
	}{
		{"no dirs", []*agentv1.Entry{dir(""), file("f-00")}, []string{"."}, map[string]string{".": "f-00"}},
		{"a dir with a file", []*agentv1.Entry{dir(""), file("f-01"), dir("d-00"), file("d-00/f-00")},
			[]string{".", "d-00"}, map[string]string{".": "f-01", "d-00": "d-00/f-00"}},
		{"an empty dir", []*agentv1.Entry{dir(""), file("f-01"), dir("d-01")},
			[]string{".", "d-01"}, map[string]string{".": "f-01", "d-01": "f-01"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := NewMetisGenerator(GenConfig{Ops: []string{OpCollide, OpRename}})
			if err != nil {
				t.Fatal(err)
			}
			filled := map[string]bool{}
			for seed := range uint64(200) {
				for _, op := range g.DrawAt(rand.New(rand.NewPCG(seed, 9)), 2, tt.state) {
					if OpKind(op) != OpCollide {
						continue
					}
					steps := Steps(op)
					in := path.Dir(steps[0].GetCreate().GetPath())
					filled[in] = true
					if r := steps[len(steps)-1].GetRename(); r != nil && r.GetPath() != tt.src[in] {
						t.Errorf("a burst in %q renames %q, want %q", in, r.GetPath(), tt.src[in])
					}
				}
			}
			if got := slices.Sorted(maps.Keys(filled)); !slices.Equal(got, tt.dirs) {
				t.Errorf("bursts fill %v, want %v", got, tt.dirs)
			}
		})
	}
}
