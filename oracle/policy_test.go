package oracle

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// refCanonicalize is the naive model of a policy: a deep copy edited rule by
// rule.
func refCanonicalize(in []*agentv1.Entry, p Policy) []*agentv1.Entry {
	var out []*agentv1.Entry
	hadLF := false
	for _, e := range in {
		if e.GetPath() == "lost+found" && e.GetKind() == agentv1.Kind_KIND_DIRECTORY {
			hadLF = true
		}
	}
	for _, e := range in {
		e = proto.Clone(e).(*agentv1.Entry)
		if p.SkipRootLostFound && (e.Path == "lost+found" || len(e.Path) > 11 && e.Path[:11] == "lost+found/") {
			continue
		}
		if p.SkipRootSketch && e.Path == ".nilfs" && e.Kind == agentv1.Kind_KIND_REGULAR {
			continue
		}
		if p.NonRegularSizeZero && e.Kind != agentv1.Kind_KIND_REGULAR {
			e.Size = 0
		}
		if p.AdjustRootNlink && p.SkipRootLostFound && hadLF && e.Path == "" && e.Kind == agentv1.Kind_KIND_DIRECTORY && e.Nlink > 0 {
			e.Nlink--
		}
		if p.IgnoreRootNlink && e.Path == "" {
			e.Nlink = 0
		}
		if p.IgnoreDirNlink && e.Kind == agentv1.Kind_KIND_DIRECTORY {
			e.Nlink = 0
		}
		if p.IgnoreOwner {
			e.Uid, e.Gid = 0, 0
		}
		if p.IgnoreMode {
			e.Mode = 0
		}
		out = append(out, e)
	}
	return out
}

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	withLF := append(tree(), &agentv1.Entry{Path: "lost+found/#12", Kind: agentv1.Kind_KIND_REGULAR, Size: 7})
	withoutLF := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 4096},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 0},
		sample(),
		{Path: "s", Kind: agentv1.Kind_KIND_SYMLINK, Mode: 0o777, Nlink: 1, Size: 4, SymlinkTarget: "d-00"},
	}
	nested := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 3},
		{Path: "d", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 3},
		{Path: "d/lost+found", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 2},
		{Path: "lost+found.txt", Kind: agentv1.Kind_KIND_REGULAR, Size: 3},
	}
	sketch := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 3},
		{Path: ".nilfs", Kind: agentv1.Kind_KIND_REGULAR, Nlink: 1},
		{Path: "d", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 2},
		{Path: "d/.nilfs", Kind: agentv1.Kind_KIND_REGULAR, Nlink: 1},
	}
	sketchDir := []*agentv1.Entry{{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 3}, {Path: ".nilfs", Kind: agentv1.Kind_KIND_DIRECTORY, Nlink: 2}}
	tests := []struct {
		name    string
		in      []*agentv1.Entry
		p       Policy
		wantLen int
	}{
		{"sketch file dropped at the root only", sketch, Policy{Name: "k", SkipRootSketch: true}, len(sketch) - 1},
		{"a directory named like the sketch file kept", sketchDir, Policy{Name: "k", SkipRootSketch: true}, len(sketchDir)},
		{"metis keeps the sketch file", sketch, MetisParity, len(sketch)},
		{"exact keeps all", withLF, Exact, len(withLF)},
		{"zero policy keeps all", withLF, Policy{}, len(withLF)},
		{"metis drops lost+found subtree", withLF, MetisParity, len(withLF) - 2},
		{"metis without lost+found", withoutLF, MetisParity, len(withoutLF)},
		{"metis keeps nested lost+found", nested, MetisParity, len(nested)},
		{"size only", withLF, Policy{Name: "s", NonRegularSizeZero: true}, len(withLF)},
		{"nlink without skip does nothing", withLF, Policy{Name: "n", AdjustRootNlink: true}, len(withLF)},
		{"overlay drops lost+found subtree", withLF, MetisOverlay, len(withLF) - 2},
		{"root nlink only", nested, Policy{Name: "r", IgnoreRootNlink: true}, len(nested)},
		{"overlay-dirs drops lost+found subtree", withLF, MetisOverlayDirs, len(withLF) - 2},
		{"directory nlink only", nested, Policy{Name: "d", IgnoreDirNlink: true}, len(nested)},
		{"owner only", withLF, Policy{Name: "o", IgnoreOwner: true}, len(withLF)},
		{"mode only", withoutLF, Policy{Name: "m", IgnoreMode: true}, len(withoutLF)},
		{"fat: metis, owner and mode", withLF, Policy{Name: "f", NonRegularSizeZero: true, SkipRootLostFound: true, AdjustRootNlink: true, IgnoreOwner: true, IgnoreMode: true}, len(withLF) - 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := make([]*agentv1.Entry, len(tt.in))
			for i, e := range tt.in {
				before[i] = proto.Clone(e).(*agentv1.Entry)
			}
			got := Canonicalize(tt.in, tt.p)
			for i := range tt.in {
				if !proto.Equal(tt.in[i], before[i]) {
					t.Fatalf("input entry %d modified: %v", i, tt.in[i])
				}
			}
			want := refCanonicalize(tt.in, tt.p)
			if len(got) != tt.wantLen || len(want) != tt.wantLen {
				t.Fatalf("len got %d, reference %d, want %d", len(got), len(want), tt.wantLen)
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					t.Errorf("entry %d: got %v, want %v", i, got[i], want[i])
				}
			}
			for _, mode := range modes {
				if FoldPolicy(tt.in, mode, tt.p) != Fold(want, mode) {
					t.Errorf("FoldPolicy(%v) differs from Fold of the reference", mode)
				}
			}
		})
	}
}

// TestMetisParityEquates: a fresh ext2 root (lost+found, nlink 3, dir size
// 1024) and a fresh root without lost+found (nlink 2, other dir sizes) fold
// to the same root under MetisParity and to different roots under Exact.
func TestMetisParityEquates(t *testing.T) {
	t.Parallel()
	ext2 := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 4, Size: 1024},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 1024},
		{Path: "lost+found", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o700, Nlink: 2, Size: 12288},
	}
	other := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 3, Size: 8},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 0},
	}
	if FoldPolicy(ext2, none, MetisParity) != FoldPolicy(other, none, MetisParity) {
		t.Error("MetisParity: roots differ")
	}
	if FoldPolicy(ext2, none, Exact) == FoldPolicy(other, none, Exact) {
		t.Error("Exact: roots equal")
	}
}

func TestPolicyByName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "exact", false},
		{"exact", "exact", false},
		{"metis", "metis", false},
		{"overlay", "overlay", false},
		{"overlay-dirs", "overlay-dirs", false},
		{"Metis", "", true},
		{"nope", "", true},
	}
	for _, tt := range tests {
		p, err := PolicyByName(tt.in)
		if (err != nil) != tt.wantErr || p.Name != tt.want {
			t.Errorf("PolicyByName(%q) = %q, %v; want %q, err %v", tt.in, p.Name, err, tt.want, tt.wantErr)
		}
	}
	if s := MetisParity.String(); s != "metis (size 0 for non-regular files; /lost+found skipped; root nlink -1 for a skipped lost+found)" {
		t.Errorf("String() = %q", s)
	}
}

// TestMetisOverlayEquates: an overlay lane's merged root (nlink 1 from
// overlayfs) and an ext2 root agree under MetisOverlay, not under
// MetisParity; link counts below the root still count.
func TestMetisOverlayEquates(t *testing.T) {
	t.Parallel()
	ext2 := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 4, Size: 1024},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 1024},
		{Path: "lost+found", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o700, Nlink: 2, Size: 12288},
	}
	overlay := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 1, Size: 1024},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 1024},
		{Path: "lost+found", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o700, Nlink: 2, Size: 12288},
	}
	if FoldPolicy(ext2, none, MetisOverlay) != FoldPolicy(overlay, none, MetisOverlay) {
		t.Error("MetisOverlay: roots differ")
	}
	if FoldPolicy(ext2, none, MetisParity) == FoldPolicy(overlay, none, MetisParity) {
		t.Error("MetisParity: roots equal")
	}
	deeper := slices.Clone(overlay)
	deeper[1] = &agentv1.Entry{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 3}
	if FoldPolicy(ext2, none, MetisOverlay) == FoldPolicy(deeper, none, MetisOverlay) {
		t.Error("MetisOverlay: a subdirectory's nlink is ignored")
	}
	if overlay[0].GetNlink() != 1 {
		t.Error("Canonicalize modified its input")
	}
	if s := MetisOverlay.String(); !strings.HasSuffix(s, "; root nlink 0)") {
		t.Errorf("String() = %q", s)
	}
}

// TestMetisOverlayDirsEquates: a merged subdirectory (nlink 1 from
// overlayfs) and the plain one agree under MetisOverlayDirs, not under
// MetisOverlay; files' link counts still count.
func TestMetisOverlayDirsEquates(t *testing.T) {
	t.Parallel()
	ext2 := []*agentv1.Entry{
		{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 5, Size: 1024},
		{Path: "d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 3, Size: 1024},
		{Path: "d-00/d-00", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2, Size: 1024},
		{Path: "f-00", Kind: agentv1.Kind_KIND_REGULAR, Mode: 0o644, Nlink: 2},
		{Path: "lost+found", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o700, Nlink: 2, Size: 12288},
	}
	overlay := cloneAll(ext2)
	overlay[0].Nlink, overlay[1].Nlink = MergedDirNlink, MergedDirNlink
	if FoldPolicy(ext2, none, MetisOverlayDirs) != FoldPolicy(overlay, none, MetisOverlayDirs) {
		t.Error("MetisOverlayDirs: roots differ")
	}
	if FoldPolicy(ext2, none, MetisOverlay) == FoldPolicy(overlay, none, MetisOverlay) {
		t.Error("MetisOverlay: roots equal")
	}
	linked := cloneAll(overlay)
	linked[3].Nlink = 1
	if FoldPolicy(ext2, none, MetisOverlayDirs) == FoldPolicy(linked, none, MetisOverlayDirs) {
		t.Error("MetisOverlayDirs: a file's nlink is ignored")
	}
	if s := MetisOverlayDirs.String(); !strings.HasSuffix(s, "; root nlink 0; directory nlink 0)") {
		t.Errorf("String() = %q", s)
	}
}

// BenchmarkJudgedRoots measures what the auto policy adds per lane and
// state: the exact root (Root of the walk as it came) beside the
// canonicalized one, on a 20-entry state like a depth-2 explore's.
func BenchmarkJudgedRoots(b *testing.B) {
	es := make([]*agentv1.Entry, 20)
	for i := range es {
		e := sample()
		e.Path = "d-0" + string(rune('0'+i%3)) + "/f-0" + string(rune('0'+i))
		es[i] = e
	}
	es[0] = &agentv1.Entry{Path: "", Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 3, Size: 1024}
	p := MetisParity
	p.IgnoreDirNlink, p.IgnoreOwner, p.IgnoreMode = true, true, true
	for _, tc := range []struct {
		name  string
		exact bool
	}{{"canonical root", false}, {"canonical and exact roots", true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Root(Canonicalize(es, p), agentv1.TimeMode_TIME_MODE_NONE)
				if tc.exact {
					Root(es, agentv1.TimeMode_TIME_MODE_NONE)
				}
			}
		})
	}
}
