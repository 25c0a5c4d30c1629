package explore

import (
	"context"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// declaredToy is a toy whose second lane refuses every chmod with EPERM
// after doing it (its state stays the first lane's) and whose exact roots
// differ from the first lane's once a file exists: what a filesystem
// declared to ignore modes, canonicalized away, looks like to the Checker.
type declaredToy struct{ *toySystem }

func (d declaredToy) Apply(ctx context.Context, op *agentv1.Request) ([]LaneResult, error) {
	res, err := d.toySystem.Apply(ctx, op)
	if err == nil && OpKind(op) == OpChmod && res[1].Errno == 0 {
		res[1].Errno = 1
	}
	return res, err
}

func (d declaredToy) Fingerprint(ctx context.Context) ([]LaneState, error) {
	st, err := d.toySystem.Fingerprint(ctx)
	if err != nil {
		return nil, err
	}
	for i := range st {
		st[i].Exact = append([]byte(nil), st[i].Root...)
		if i == 1 && len(d.lanes[1].entries()) > 1 {
			st[i].Exact[0] ^= 0xff
		}
	}
	return st, nil
}

func TestDeclaredDifferences(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		declared     map[string]map[string]int32
		wantFindings bool
		wantOps      bool // DeclaredOps > 0
	}{
		{"nothing declared: the errno differences are findings", nil, true, false},
		{"chmod's EPERM declared", map[string]map[string]int32{"lane1": {OpChmod: 1}}, false, true},
		{"another errno declared", map[string]map[string]int32{"lane1": {OpChmod: 13}}, true, false},
		{"declared for the other lane", map[string]map[string]int32{"lane0": {OpChmod: 1}}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Depth: 2, Branching: 10, Seed: 3, Ops: []string{OpCreateFile, OpChmod},
				Pool: PathPool{Files: 2, Depth: 1}, Declared: tt.declared}
			c, err := NewChecker(declaredToy{newToy("", "")}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res.Findings) > 0; got != tt.wantFindings {
				t.Errorf("findings %v, want any: %v", res.Findings, tt.wantFindings)
			}
			for _, f := range res.Findings {
				if f.Kind != KindErrno || OpKind(f.Trace[len(f.Trace)-1]) != OpChmod {
					t.Errorf("finding %s %v, want a chmod errno divergence", f.Kind, opKinds(f.Trace))
				}
			}
			if got := res.DeclaredOps > 0; got != tt.wantOps {
				t.Errorf("DeclaredOps = %d, want > 0: %v", res.DeclaredOps, tt.wantOps)
			}
			// The exact roots differ in every state with a file, declared
			// or not: each such state is counted, none is a finding.
			if res.DeclaredStates == 0 || res.DeclaredStates >= res.Unique {
				t.Errorf("DeclaredStates = %d of %d unique states, want all but the root", res.DeclaredStates, res.Unique)
			}
		})
	}
}

func TestDeclaredOnly(t *testing.T) {
	t.Parallel()
	chmod := chmod("f", 0o600)
	decl := map[string]map[string]int32{"vfat": {OpChmod: 1, OpSymlink: 1}, "exfat": {OpChmod: 1}}
	r := func(pairs ...any) []LaneResult {
		var out []LaneResult
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, LaneResult{Lane: pairs[i].(string), Errno: int32(pairs[i+1].(int))})
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		results []LaneResult
		want    bool
	}{
		{"declared lane gives its errno", r("ext2", 0, "vfat", 1), true},
		{"two declared lanes", r("ext2", 0, "vfat", 1, "exfat", 1), true},
		{"every lane declared", r("vfat", 1, "exfat", 1), true},
		{"the rest disagree", r("ext2", 0, "xfs", 2, "vfat", 1), false},
		{"another errno", r("ext2", 0, "vfat", 13), false},
		{"undeclared lane", r("ext2", 0, "btrfs", 1), false},
	} {
		if got := declaredOnly(decl, chmod, tt.results); got != tt.want {
			t.Errorf("%s: declaredOnly = %v, want %v", tt.name, got, tt.want)
		}
	}
	if declaredOnly(nil, chmod, r("ext2", 0, "vfat", 1)) {
		t.Error("nil Declared excused a difference")
	}
}

// TestDeclaredShardsMerge: the shards' declared states, merged, are the
// whole search's.
func TestDeclaredShardsMerge(t *testing.T) {
	t.Parallel()
	cfg := Config{Depth: 3, Branching: 10, Seed: 5, Ops: []string{OpCreateFile, OpChmod, OpUnlink},
		Pool: PathPool{Files: 2, Depth: 1}, Declared: map[string]map[string]int32{"lane1": {OpChmod: 1}}, KeepStates: true}
	run := func(cfg Config) *Result {
		t.Helper()
		return mustCheck(t, declaredToy{newToy("", "")}, cfg)
	}
	whole := run(cfg)
	if whole.DeclaredStates == 0 || len(whole.DeclaredKeys) != whole.DeclaredStates {
		t.Fatalf("whole: %d declared states, %d keys", whole.DeclaredStates, len(whole.DeclaredKeys))
	}
	var parts []Part
	for i := range 3 {
		c := cfg
		c.Shard = Shard{Index: i, Count: 3, Depth: 2}
		res := run(c)
		parts = append(parts, Part{StateKeys: res.StateKeys, DeclaredKeys: res.DeclaredKeys})
	}
	m := Merge(parts)
	if m.Unique != whole.Unique || m.DeclaredStates != whole.DeclaredStates {
		t.Errorf("merged %d unique, %d declared; whole %d, %d", m.Unique, m.DeclaredStates, whole.Unique, whole.DeclaredStates)
	}
}
