package oracle

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Entries for the Merge tests: the fields that say where an entry came
// from are mode, nlink and content.
func mdir(p string, nlink uint64, mode uint32) *agentv1.Entry {
	return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_DIRECTORY, Mode: mode, Nlink: nlink, Size: 1024}
}

func mfile(p, content string, mode uint32) *agentv1.Entry {
	return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_REGULAR, Mode: mode, Nlink: 1, Size: int64(len(content)), ContentHash: []byte(content)}
}

func whiteout(p string) *agentv1.Entry {
	return SymbolicEntry(Class{Marker: MarkerWhiteout, Target: p})
}
func opaque(p string) *agentv1.Entry { return SymbolicEntry(Class{Marker: MarkerOpaque, Target: p}) }

// show renders entries as "path kind mode nlink content", sorted.
func show(es []*agentv1.Entry) []string {
	var out []string
	for _, e := range es {
		k := "f"
		if e.GetKind() == agentv1.Kind_KIND_DIRECTORY {
			k = "d"
		}
		p := e.GetPath()
		if p == "" {
			p = "/"
		}
		out = append(out, fmt.Sprintf("%s %s %o %d %s", p, k, e.GetMode(), e.GetNlink(), e.GetContentHash()))
	}
	slices.Sort(out)
	return out
}

func TestMerge(t *testing.T) {
	t.Parallel()
	// The lower layer: a fresh ext2 with a small tree (d-02 holds a
	// directory, so its nlink is 3).
	lower := []*agentv1.Entry{
		mdir("", 6, 0o755), mdir("lost+found", 2, 0o700),
		mfile("f-00", "A", 0o644), mfile("f-01", "B", 0o644),
		mdir("d-00", 2, 0o755), mfile("d-00/f-00", "C", 0o644),
		mdir("d-01", 2, 0o755),
		mdir("d-02", 3, 0o755), mdir("d-02/d-00", 2, 0o755), mfile("d-02/d-00/f-00", "D", 0o644),
	}
	untouched := []string{
		"/ d 755 1 ", // the root is a merged directory
		"d-00 d 755 2 ", "d-00/f-00 f 644 1 C", "d-01 d 755 2 ",
		"d-02 d 755 3 ", "d-02/d-00 d 755 2 ", "d-02/d-00/f-00 f 644 1 D",
		"f-00 f 644 1 A", "f-01 f 644 1 B", "lost+found d 700 2 ",
	}
	without := func(paths ...string) []string {
		var out []string
		for _, s := range untouched {
			keep := true
			for _, p := range paths {
				keep = keep && !strings.HasPrefix(s, p+" ")
			}
			if keep {
				out = append(out, s)
			}
		}
		return out
	}
	with := func(base []string, add ...string) []string {
		out := append(slices.Clone(base), add...)
		slices.Sort(out)
		return out
	}
	root := mdir("", 2, 0o755) // the upper directory
	tests := []struct {
		name  string
		lower []*agentv1.Entry
		upper []*agentv1.Entry
		want  []string
	}{
		{"fresh upper", lower, []*agentv1.Entry{root}, untouched},
		{"upper root's own mode and owner", lower, []*agentv1.Entry{mdir("", 2, 0o700)},
			with(without("/"), "/ d 700 1 ")},
		{"whiteout of a file", lower, []*agentv1.Entry{root, whiteout("f-00")}, without("f-00")},
		{"whiteout of a directory hides its subtree", lower, []*agentv1.Entry{root, whiteout("d-02")},
			without("d-02", "d-02/d-00", "d-02/d-00/f-00")},
		{"opaque directory", lower, []*agentv1.Entry{root, mdir("d-00", 2, 0o700), opaque("d-00")},
			with(without("d-00", "d-00/f-00"), "d-00 d 700 2 ")},
		{"opaque directory with a new file", lower, []*agentv1.Entry{root, mdir("d-00", 2, 0o755), opaque("d-00"), mfile("d-00/f-01", "E", 0o600)},
			with(without("d-00", "d-00/f-00"), "d-00 d 755 2 ", "d-00/f-01 f 600 1 E")},
		{"replaced file (copied up, chmod)", lower, []*agentv1.Entry{root, mfile("f-01", "B", 0o600)},
			with(without("f-01"), "f-01 f 600 1 B")},
		{"replaced file (copied up, written)", lower, []*agentv1.Entry{root, mfile("f-00", "AAAA", 0o644)},
			with(without("f-00"), "f-00 f 644 1 AAAA")},
		{"new file in a merged directory", lower, []*agentv1.Entry{root, mdir("d-00", 2, 0o755), mfile("d-00/f-01", "E", 0o644)},
			with(without("d-00"), "d-00 d 755 1 ", "d-00/f-01 f 644 1 E")},
		{"whiteout in a merged directory", lower, []*agentv1.Entry{root, mdir("d-00", 2, 0o755), whiteout("d-00/f-00")},
			with(without("d-00", "d-00/f-00"), "d-00 d 755 1 ")},
		{"nested: opaque inside merged, whiteout inside merged", lower, []*agentv1.Entry{
			root,
			mdir("d-02", 3, 0o755), mdir("d-02/d-00", 2, 0o755), opaque("d-02/d-00"), mfile("d-02/d-00/f-01", "F", 0o644),
			mdir("d-00", 2, 0o755), whiteout("d-00/f-00"),
		}, with(without("d-02", "d-02/d-00", "d-02/d-00/f-00", "d-00", "d-00/f-00"),
			"d-02 d 755 1 ", "d-02/d-00 d 755 2 ", "d-02/d-00/f-01 f 644 1 F", "d-00 d 755 1 ")},
		{"nested: merged inside merged", lower, []*agentv1.Entry{root, mdir("d-02", 3, 0o755), mdir("d-02/d-00", 2, 0o711)},
			with(without("d-02", "d-02/d-00"), "d-02 d 755 1 ", "d-02/d-00 d 711 1 ")},
		{"upper file over a lower directory", lower, []*agentv1.Entry{root, mfile("d-02", "G", 0o644)},
			with(without("d-02", "d-02/d-00", "d-02/d-00/f-00"), "d-02 f 644 1 G")},
		{"upper directory over a lower file", lower, []*agentv1.Entry{root, mdir("f-00", 2, 0o755), opaque("f-00")},
			with(without("f-00"), "f-00 d 755 2 ")},
		{"upper directory over a lower file, not opaque", lower, []*agentv1.Entry{root, mdir("f-00", 2, 0o755)},
			with(without("f-00"), "f-00 d 755 2 ")},
		{"new directory over nothing", lower, []*agentv1.Entry{root, mdir("d-03", 3, 0o755), mdir("d-03/d-00", 2, 0o755)},
			with(untouched, "d-03 d 755 3 ", "d-03/d-00 d 755 2 ")},
		{"removed and made again: opaque, lower children gone", lower, []*agentv1.Entry{root, whiteout("f-00"), mdir("d-01", 2, 0o755), opaque("d-01")},
			without("f-00")},
		{"opaque root (AUFS)", lower, []*agentv1.Entry{root, opaque(""), mfile("f-02", "H", 0o644)},
			[]string{"/ d 755 2 ", "f-02 f 644 1 H"}},
		{"whiteout beside an entry of its path", lower, []*agentv1.Entry{root, mfile("f-00", "Z", 0o644), whiteout("f-00")},
			with(without("f-00"), "f-00 f 644 1 Z")},
		{"whiteout of a path the lower layer lacks", lower, []*agentv1.Entry{root, whiteout("f-02"), whiteout("d-09/f-00")}, untouched},
		{"empty lower layer", nil, []*agentv1.Entry{root, mfile("f-00", "A", 0o644)},
			[]string{"/ d 755 2 ", "f-00 f 644 1 A"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lowerIn, upperIn := cloneAll(tt.lower), cloneAll(tt.upper)
			got := Merge(tt.lower, tt.upper)
			if g := show(got); !slices.Equal(g, tt.want) {
				t.Errorf("Merge:\n got %q\nwant %q", g, tt.want)
			}
			for i, e := range got[1:] {
				if got[i].GetPath() >= e.GetPath() {
					t.Errorf("result not sorted by path: %q before %q", got[i].GetPath(), e.GetPath())
				}
			}
			if !equalAll(lowerIn, tt.lower) || !equalAll(upperIn, tt.upper) {
				t.Error("Merge modified its input")
			}
		})
	}
}

// TestMergeIdentity: over an empty lower layer (a fresh ext2: root and
// lost+found) with an upper layer without markers, the view is the upper
// layer plus lost+found, with the root merged.
func TestMergeIdentity(t *testing.T) {
	t.Parallel()
	lower := []*agentv1.Entry{mdir("", 3, 0o755), mdir("lost+found", 2, 0o700)}
	upper := []*agentv1.Entry{mdir("", 3, 0o755), mdir("d", 2, 0o755), mfile("d/f", "x", 0o644)}
	got := Merge(lower, upper)
	want := append(cloneAll(upper), lower[1])
	want[0].Nlink = MergedDirNlink
	if p, ok := FirstDiff(got, want, agentv1.TimeMode_TIME_MODE_ALL); ok {
		t.Errorf("Merge differs from the upper layer at %q: %q", p, show(got))
	}
	// Under the overlay policy the root's nlink is out of the picture, and
	// lost+found with it: the view is the upper layer.
	a := FoldPolicy(got, agentv1.TimeMode_TIME_MODE_NONE, MetisOverlay)
	b := FoldPolicy(upper, agentv1.TimeMode_TIME_MODE_NONE, MetisOverlay)
	if a != b {
		t.Error("under the overlay policy, Merge over an empty lower layer is not the upper layer")
	}
}

func cloneAll(es []*agentv1.Entry) []*agentv1.Entry {
	out := make([]*agentv1.Entry, len(es))
	for i, e := range es {
		out[i] = proto.Clone(e).(*agentv1.Entry)
	}
	return out
}

func equalAll(a, b []*agentv1.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y *agentv1.Entry) bool { return proto.Equal(x, y) })
}

func TestWithoutSymlinkAtime(t *testing.T) {
	at := &agentv1.Timespec{Sec: 5}
	in := []*agentv1.Entry{
		{Path: "s", Kind: agentv1.Kind_KIND_SYMLINK, Atime: at, Mtime: at},
		{Path: "f", Kind: agentv1.Kind_KIND_REGULAR, Atime: at},
	}
	out := WithoutSymlinkAtime(in)
	if out[0].GetAtime() != nil || out[0].GetMtime() == nil || out[1].GetAtime() == nil {
		t.Errorf("got %v", out)
	}
	if in[0].GetAtime() == nil {
		t.Error("the input was changed")
	}
}
