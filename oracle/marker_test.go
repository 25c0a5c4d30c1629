package oracle

import (
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	reg := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_REGULAR} }
	dir := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_DIRECTORY} }
	chr := func(p string) *agentv1.Entry { return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_CHAR_DEVICE} }
	y := map[string][]byte{"trusted.overlay.opaque": []byte("y")}
	tests := []struct {
		name   string
		e      *agentv1.Entry
		rdev   uint64
		xattrs map[string][]byte
		want   Class
	}{
		{"kernel whiteout", chr("d/f"), 0, nil, Class{MarkerWhiteout, "d/f", DialectKernel}},
		{"kernel whiteout at root", chr("f"), 0, nil, Class{MarkerWhiteout, "f", DialectKernel}},
		{"char device 1:3 is not a marker", chr("null"), 1<<8 | 3, nil, Class{}},
		{"block device 0 is not a marker", &agentv1.Entry{Path: "b", Kind: agentv1.Kind_KIND_BLOCK_DEVICE}, 0, nil, Class{}},
		{"kernel opaque dir", dir("d"), 0, y, Class{MarkerOpaque, "d", DialectKernel}},
		{"kernel opaque dir, userxattr", dir("d"), 0, map[string][]byte{"user.overlay.opaque": []byte("y")}, Class{MarkerOpaque, "d", DialectKernel}},
		{"opaque x is not opaque", dir("d"), 0, map[string][]byte{"trusted.overlay.opaque": []byte("x")}, Class{}},
		{"plain dir", dir("d"), 0, nil, Class{}},
		{"opaque xattr on a file", reg("f"), 0, y, Class{}},
		{"kernel xwhiteout", reg("d/f"), 0, map[string][]byte{"trusted.overlay.whiteout": nil}, Class{MarkerWhiteout, "d/f", DialectKernel}},
		{"aufs whiteout", reg("d/.wh.f"), 0, nil, Class{MarkerWhiteout, "d/f", DialectAUFS}},
		{"aufs whiteout at root", reg(".wh.f-00"), 0, nil, Class{MarkerWhiteout, "f-00", DialectAUFS}},
		{"aufs opaque", reg("d/.wh..wh..opq"), 0, nil, Class{MarkerOpaque, "d", DialectAUFS}},
		{"aufs opaque at root", reg(".wh..wh..opq"), 0, nil, Class{MarkerOpaque, "", DialectAUFS}},
		{"aufs reserved plnk", reg(".wh..wh.plnk"), 0, nil, Class{}},
		{"bare prefix", reg(".wh."), 0, nil, Class{}},
		{"aufs name on a dir", dir("d/.wh.f"), 0, nil, Class{}},
		{"aufs name on a symlink", &agentv1.Entry{Path: ".wh.f", Kind: agentv1.Kind_KIND_SYMLINK}, 0, nil, Class{}},
		{"ordinary file", reg("d/f.wh."), 0, nil, Class{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Classify(tt.e, tt.rdev, tt.xattrs)
			if got != tt.want {
				t.Errorf("Classify = %+v, want %+v", got, tt.want)
			}
			if s := SymbolicEntry(got); s != nil {
				if back := ParseSymbolic(s); back.Marker != got.Marker || back.Target != got.Target {
					t.Errorf("ParseSymbolic(SymbolicEntry) = %+v, want %+v", back, got)
				}
			} else if got.Marker != MarkerNone {
				t.Error("no symbolic entry for a marker")
			}
		})
	}
}

// TestNormalizeUpperDialectFree: the same logical upper layer spelled in the
// kernel and the AUFS dialects normalizes to the same entries and root, and
// nothing unrelated is dropped.
func TestNormalizeUpperDialectFree(t *testing.T) {
	t.Parallel()
	d := func(p string) *agentv1.Entry {
		return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_DIRECTORY, Mode: 0o755, Nlink: 2}
	}
	f := func(p string) *agentv1.Entry {
		return &agentv1.Entry{Path: p, Kind: agentv1.Kind_KIND_REGULAR, Mode: 0o644, Nlink: 1, Size: 3}
	}
	null := &agentv1.Entry{Path: "dev-null", Kind: agentv1.Kind_KIND_CHAR_DEVICE, Mode: 0o666, Nlink: 1}
	kernel := []UpperEntry{
		{Entry: d("")},
		{Entry: d("d-00"), Xattrs: map[string][]byte{"trusted.overlay.opaque": []byte("y")}},
		{Entry: f("d-00/f-01")},
		{Entry: &agentv1.Entry{Path: "f-00", Kind: agentv1.Kind_KIND_CHAR_DEVICE, Nlink: 1}, Rdev: 0},
		{Entry: null, Rdev: 1<<8 | 3},
	}
	aufs := []UpperEntry{
		{Entry: d("")},
		{Entry: d("d-00")},
		{Entry: &agentv1.Entry{Path: "d-00/.wh..wh..opq", Kind: agentv1.Kind_KIND_REGULAR, Mode: 0o444}},
		{Entry: f("d-00/f-01")},
		{Entry: &agentv1.Entry{Path: ".wh.f-00", Kind: agentv1.Kind_KIND_REGULAR, Mode: 0o444, Nlink: 1}},
		{Entry: null, Rdev: 1<<8 | 3},
	}
	gotK, gotA := NormalizeUpper(kernel), NormalizeUpper(aufs)
	if a, b := Fold(gotK, none), Fold(gotA, none); a != b {
		p, _ := FirstDiff(gotK, gotA, none)
		t.Fatalf("dialects fold differently; first difference at %q", p)
	}
	want := map[string]Marker{"d-00": MarkerOpaque, "f-00": MarkerWhiteout}
	got := map[string]Marker{}
	kept := false
	for _, e := range gotK {
		if c := ParseSymbolic(e); c.Marker != MarkerNone {
			got[c.Target] = c.Marker
		}
		if proto.Equal(e, null) {
			kept = true
		}
	}
	if len(got) != len(want) || got["d-00"] != want["d-00"] || got["f-00"] != want["f-00"] {
		t.Errorf("markers %v, want %v", got, want)
	}
	if !kept {
		t.Error("a non-whiteout device node was dropped")
	}
	if len(gotK) != 6 {
		t.Errorf("kernel: %d entries, want 6 (4 kept + 2 symbolic)", len(gotK))
	}
	// A whiteout that a type-first walk would skip still changes the root.
	withoutWhiteout := NormalizeUpper(kernel[:3])
	if Fold(withoutWhiteout, none) == Fold(gotK, none) {
		t.Error("whiteout does not change the root")
	}
}

func TestHasMetacopy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		xattrs map[string][]byte
		want   bool
	}{
		{nil, false},
		{map[string][]byte{"trusted.overlay.opaque": []byte("y"), "trusted.overlay.origin": {1}}, false},
		{map[string][]byte{"trusted.overlay.metacopy": nil}, true},
		{map[string][]byte{"user.overlay.metacopy": {}}, true},
	}
	for _, tt := range tests {
		if got := HasMetacopy(tt.xattrs); got != tt.want {
			t.Errorf("HasMetacopy(%v) = %v, want %v", tt.xattrs, got, tt.want)
		}
	}
}
