package oracle

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/zeebo/blake3"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

const (
	none  = agentv1.TimeMode_TIME_MODE_NONE
	unset = agentv1.TimeMode_TIME_MODE_UNSPECIFIED
	mtime = agentv1.TimeMode_TIME_MODE_MTIME
	all   = agentv1.TimeMode_TIME_MODE_ALL
)

var modes = []TimeMode{unset, none, mtime, all}

func ts(sec, nsec int64) *agentv1.Timespec { return &agentv1.Timespec{Sec: sec, Nsec: nsec} }

func sample() *agentv1.Entry {
	return &agentv1.Entry{
		Path:          "d-00/f-00",
		Kind:          agentv1.Kind_KIND_REGULAR,
		Mode:          0o644,
		Uid:           1000,
		Gid:           1000,
		Nlink:         1,
		Size:          4096,
		ContentHash:   bytes.Repeat([]byte{0xab}, 32),
		SymlinkTarget: "",
		Atime:         ts(100, 1),
		Mtime:         ts(200, 2),
		Ctime:         ts(300, 3),
	}
}

func tree() []*agentv1.Entry {
	return []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 3, Size: 1024},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 1024},
		sample(),
		{Path: "lost+found", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o700, Nlink: 2, Size: 12288},
		{Path: "s", Kind: agentv1.Kind_KIND_SYMLINK, Mode: 0o777, Nlink: 1, Size: 4, SymlinkTarget: "d-00"},
	}
}

// refLeaf is the documented leaf encoding written out independently with
// encoding/binary.
func refLeaf(e *agentv1.Entry, mode TimeMode) [32]byte {
	if mode != mtime && mode != all {
		mode = none
	}
	var b bytes.Buffer
	w := func(v any) {
		if err := binary.Write(&b, binary.BigEndian, v); err != nil {
			panic(err)
		}
	}
	b.WriteString("themis.oracle.leaf.v1\x00")
	w(uint32(mode))
	w(uint64(len(e.GetPath())))
	b.WriteString(e.GetPath())
	w(uint32(e.GetKind()))
	w(e.GetMode())
	w(e.GetUid())
	w(e.GetGid())
	w(e.GetNlink())
	w(e.GetSize())
	w(uint64(len(e.GetContentHash())))
	b.Write(e.GetContentHash())
	w(uint64(len(e.GetSymlinkTarget())))
	b.WriteString(e.GetSymlinkTarget())
	var times []*agentv1.Timespec
	switch mode {
	case mtime:
		times = []*agentv1.Timespec{e.GetMtime()}
	case all:
		times = []*agentv1.Timespec{e.GetAtime(), e.GetMtime(), e.GetCtime()}
	}
	for _, t := range times {
		w(t.GetSec())
		w(t.GetNsec())
	}
	if n := e.GetReadErrno(); n != 0 {
		w(uint64(len("read_errno")))
		b.WriteString("read_errno")
		w(n)
	}
	return blake3.Sum256(b.Bytes())
}

// refFold is the documented fold computed from a plainly sorted list of
// (path, leaf) strings.
func refFold(entries []*agentv1.Entry, mode TimeMode) [32]byte {
	m := mode
	if m != mtime && m != all {
		m = none
	}
	items := make([]string, len(entries))
	for i, e := range entries {
		l := refLeaf(e, mode)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(e.GetPath())))
		items[i] = e.GetPath() + "\x00" + string(n[:]) + e.GetPath() + string(l[:])
	}
	sort.Strings(items) // path, then a NUL (below any path byte after it), then the rest
	var b bytes.Buffer
	b.WriteString("themis.oracle.fold.v1\x00")
	var hdr [12]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(m))
	binary.BigEndian.PutUint64(hdr[4:], uint64(len(entries)))
	b.Write(hdr[:])
	for _, it := range items {
		_, rest, _ := strings.Cut(it, "\x00")
		b.WriteString(rest)
	}
	return blake3.Sum256(b.Bytes())
}

func TestLeafHashMatchesReference(t *testing.T) {
	t.Parallel()
	for _, e := range append(tree(), nil, &agentv1.Entry{}, &agentv1.Entry{Path: "bad", ReadErrno: 74}) {
		for _, m := range modes {
			if got, want := LeafHash(e, m), refLeaf(e, m); got != want {
				t.Errorf("LeafHash(%q, %v) = %x, want %x", e.GetPath(), m, got, want)
			}
		}
	}
}

func TestFoldMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 50; n++ {
		var es []*agentv1.Entry
		for i := 0; i < rng.IntN(20); i++ {
			// Paths without NUL so the reference's sort key is sound.
			es = append(es, &agentv1.Entry{
				Path:  string(rune('a'+rng.IntN(4))) + "/" + string(rune('a'+rng.IntN(4))),
				Mode:  uint32(rng.IntN(8)),
				Size:  int64(rng.IntN(3)),
				Mtime: ts(int64(rng.IntN(3)), 0),
			})
		}
		for _, m := range modes {
			if got, want := Fold(es, m), refFold(es, m); got != want {
				t.Fatalf("Fold(%d entries, %v) = %x, want %x", len(es), m, got, want)
			}
		}
	}
}

// TestGolden pins the encoding: if this changes, every stored root changes,
// so bump the version in the domain strings instead of editing the constants.
func TestGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode TimeMode
		want string
	}{
		{none, goldenNone},
		{mtime, goldenMtime},
		{all, goldenAll},
	}
	for _, tt := range tests {
		got := Fold(tree(), tt.mode)
		if h := hex.EncodeToString(got[:]); h != tt.want {
			t.Errorf("Fold(tree, %v) = %s, want %s", tt.mode, h, tt.want)
		}
	}
}

func TestFoldOrderIndependent(t *testing.T) {
	t.Parallel()
	es := tree()
	es = append(es, &agentv1.Entry{Path: "dup", Mode: 1}, &agentv1.Entry{Path: "dup", Mode: 2})
	orig := make([]string, len(es))
	for i, e := range es {
		orig[i] = e.GetPath()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, m := range modes {
		want := Fold(es, m)
		for i := 0; i < 20; i++ {
			p := make([]*agentv1.Entry, len(es))
			copy(p, es)
			rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
			if got := Fold(p, m); got != want {
				t.Fatalf("Fold of a permutation = %x, want %x", got, want)
			}
		}
	}
	for i, e := range es {
		if e.GetPath() != orig[i] {
			t.Fatalf("Fold reordered its input: entry %d is %q, want %q", i, e.GetPath(), orig[i])
		}
	}
}

func TestFoldEachFieldMatters(t *testing.T) {
	t.Parallel()
	type mutation struct {
		name string
		f    func(e *agentv1.Entry)
		// in lists the modes under which the field must change the root.
		in []TimeMode
	}
	always := modes
	muts := []mutation{
		{"path", func(e *agentv1.Entry) { e.Path = "d-00/f-01" }, always},
		{"kind", func(e *agentv1.Entry) { e.Kind = agentv1.Kind_KIND_FIFO }, always},
		{"mode", func(e *agentv1.Entry) { e.Mode = 0o600 }, always},
		{"uid", func(e *agentv1.Entry) { e.Uid++ }, always},
		{"gid", func(e *agentv1.Entry) { e.Gid++ }, always},
		{"nlink", func(e *agentv1.Entry) { e.Nlink++ }, always},
		{"size", func(e *agentv1.Entry) { e.Size++ }, always},
		{"content_hash", func(e *agentv1.Entry) { e.ContentHash[31] ^= 1 }, always},
		{"content_hash empty", func(e *agentv1.Entry) { e.ContentHash = nil }, always},
		{"symlink_target", func(e *agentv1.Entry) { e.SymlinkTarget = "x" }, always},
		{"read_errno", func(e *agentv1.Entry) { e.ReadErrno = 74 }, always},
		{"atime.sec", func(e *agentv1.Entry) { e.Atime.Sec++ }, []TimeMode{all}},
		{"atime.nsec", func(e *agentv1.Entry) { e.Atime.Nsec++ }, []TimeMode{all}},
		{"mtime.sec", func(e *agentv1.Entry) { e.Mtime.Sec++ }, []TimeMode{mtime, all}},
		{"mtime.nsec", func(e *agentv1.Entry) { e.Mtime.Nsec++ }, []TimeMode{mtime, all}},
		{"mtime nil", func(e *agentv1.Entry) { e.Mtime = nil }, []TimeMode{mtime, all}},
		{"ctime.sec", func(e *agentv1.Entry) { e.Ctime.Sec++ }, []TimeMode{all}},
		{"ctime.nsec", func(e *agentv1.Entry) { e.Ctime.Nsec++ }, []TimeMode{all}},
	}
	for _, mu := range muts {
		for _, m := range modes {
			base := tree()
			changed := tree()
			mu.f(changed[2])
			want := false
			for _, in := range mu.in {
				want = want || in == m
			}
			got := Fold(base, m) != Fold(changed, m)
			if got != want {
				t.Errorf("%s under %v: root changed = %v, want %v", mu.name, m, got, want)
			}
			p, ok := FirstDiff(base, changed, m)
			if ok != want {
				t.Errorf("%s under %v: FirstDiff ok = %v, want %v", mu.name, m, ok, want)
			}
			if want && mu.name != "path" && p != "d-00/f-00" {
				t.Errorf("%s under %v: FirstDiff = %q, want d-00/f-00", mu.name, m, p)
			}
		}
	}
}

func TestFoldUnspecifiedIsNone(t *testing.T) {
	t.Parallel()
	if Fold(tree(), unset) != Fold(tree(), none) {
		t.Error("Fold under UNSPECIFIED differs from NONE")
	}
	if Fold(tree(), TimeMode(99)) != Fold(tree(), none) {
		t.Error("Fold under an unknown mode differs from NONE")
	}
	if Fold(tree(), none) == Fold(tree(), mtime) {
		t.Error("Fold under NONE equals MTIME: modes must be domain-separated")
	}
}

func TestFoldLengthPrefix(t *testing.T) {
	t.Parallel()
	// Moving bytes between adjacent strings must change the hash.
	a := []*agentv1.Entry{{Path: "ab", SymlinkTarget: "c"}}
	b := []*agentv1.Entry{{Path: "a", SymlinkTarget: "bc"}}
	if Fold(a, none) == Fold(b, none) {
		t.Error("length prefixes do not separate path and symlink target")
	}
	if Fold(nil, none) == Fold([]*agentv1.Entry{{}}, none) {
		t.Error("empty set folds like a set with one empty entry")
	}
}

func TestFirstDiff(t *testing.T) {
	t.Parallel()
	e := func(p string, mode uint32) *agentv1.Entry { return &agentv1.Entry{Path: p, Mode: mode} }
	tests := []struct {
		name   string
		a, b   []*agentv1.Entry
		want   string
		wantOK bool
	}{
		{"both empty", nil, nil, "", false},
		{"equal", []*agentv1.Entry{e("a", 1), e("b", 1)}, []*agentv1.Entry{e("b", 1), e("a", 1)}, "", false},
		{"only in a", []*agentv1.Entry{e("a", 1), e("b", 1)}, []*agentv1.Entry{e("b", 1)}, "a", true},
		{"only in b", []*agentv1.Entry{e("b", 1)}, []*agentv1.Entry{e("a", 1), e("b", 1)}, "a", true},
		{"tail in a", []*agentv1.Entry{e("a", 1), e("z", 1)}, []*agentv1.Entry{e("a", 1)}, "z", true},
		{"tail in b", []*agentv1.Entry{e("a", 1)}, []*agentv1.Entry{e("a", 1), e("z", 1)}, "z", true},
		{"leaf differs", []*agentv1.Entry{e("a", 1), e("b", 1), e("c", 1)}, []*agentv1.Entry{e("a", 1), e("b", 2), e("c", 2)}, "b", true},
		{"byte order", []*agentv1.Entry{e("B", 1), e("a", 1)}, []*agentv1.Entry{e("B", 2), e("a", 2)}, "B", true},
		{"root path", []*agentv1.Entry{e("", 1), e("a", 1)}, []*agentv1.Entry{e("", 2), e("a", 1)}, "", true},
		{"duplicate", []*agentv1.Entry{e("a", 1), e("a", 2)}, []*agentv1.Entry{e("a", 1)}, "a", true},
		{"duplicate equal", []*agentv1.Entry{e("a", 2), e("a", 1)}, []*agentv1.Entry{e("a", 1), e("a", 2)}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := FirstDiff(tt.a, tt.b, none)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("FirstDiff = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
			if eq := Fold(tt.a, none) == Fold(tt.b, none); eq == ok {
				t.Errorf("FirstDiff ok = %v but roots equal = %v", ok, eq)
			}
		})
	}
}

func TestDoesNotMutate(t *testing.T) {
	t.Parallel()
	es := tree()
	before := make([]*agentv1.Entry, len(es))
	for i, e := range es {
		before[i] = proto.Clone(e).(*agentv1.Entry)
	}
	Fold(es, all)
	FirstDiff(es, es[:2], all)
	for i := range es {
		if !proto.Equal(es[i], before[i]) {
			t.Fatalf("entry %d changed", i)
		}
	}
}

// TestImports keeps the package pure: no os/exec, grpc or vmm in its
// dependency graph.
func TestImports(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not in PATH")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "os/exec" || strings.Contains(dep, "google.golang.org/grpc") ||
			strings.HasPrefix(dep, "github.com/themisfs/themis/vmm") {
			t.Errorf("oracle depends on %s", dep)
		}
	}
}

func BenchmarkFold(b *testing.B) {
	es := make([]*agentv1.Entry, 10000)
	for i := range es {
		e := sample()
		e.Path = strings.Repeat("d/", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		es[i] = e
	}
	b.ReportAllocs()
	for b.Loop() {
		Fold(es, all)
	}
}

// Golden roots of tree(); see TestGolden.
const (
	goldenNone  = "c2dfaffb0c3b092265892972c04486bc34d1d3893c621869cc1e403b31e1467c"
	goldenMtime = "e4333edbb0060f240c39d83aa64e7655e2c47b4a519f0e95484fa3de0ec03f01"
	goldenAll   = "0a18dbb8350d996a53fc6f6e2a195a6dad680646f0ca438946a89d0e4b62622c"
)

func TestRootAndFind(t *testing.T) {
	t.Parallel()
	es := []*agentv1.Entry{{Path: ""}, {Path: "a"}, {Path: "b/c"}}
	want := Fold(es, agentv1.TimeMode_TIME_MODE_NONE)
	if got := Root(es, agentv1.TimeMode_TIME_MODE_NONE); string(got) != string(want[:]) {
		t.Errorf("Root = %x, want Fold's %x", got, want)
	}
	for _, tt := range []struct {
		path string
		want *agentv1.Entry
	}{{"a", es[1]}, {"", es[0]}, {"b/c", es[2]}, {"nope", nil}} {
		if got := Find(es, tt.path); got != tt.want {
			t.Errorf("Find(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestErrnoText(t *testing.T) {
	t.Parallel()
	for n, want := range map[uint32]string{0: "none", 74: "errno 74 (bad message)", 5: "errno 5 (input/output error)"} {
		if got := ErrnoText(n); got != want {
			t.Errorf("ErrnoText(%d) = %q, want %q", n, got, want)
		}
	}
}
