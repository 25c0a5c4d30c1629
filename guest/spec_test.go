package guest

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseLaneSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    LaneSpec
		wantErr string // substring; "" means success
	}{
		{in: "ext2", want: LaneSpec{Name: "ext2", FS: "ext2", InodeSize: 128, SizeMiB: 8}},
		{in: "ext3", want: LaneSpec{Name: "ext3", FS: "ext3", InodeSize: 256, SizeMiB: 8}},
		{in: "ext4", want: LaneSpec{Name: "ext4", FS: "ext4", InodeSize: 256, SizeMiB: 8}},
		{in: "vfat", want: LaneSpec{Name: "vfat", FS: "vfat", SizeMiB: 16}},
		{in: " EXT4 ", want: LaneSpec{Name: "EXT4", FS: "ext4", InodeSize: 256, SizeMiB: 8}},
		{in: "ext2:inode_size=256", want: LaneSpec{Name: "ext2:inode_size=256", FS: "ext2", InodeSize: 256, SizeMiB: 8}},
		{in: "ext4:inode_size=128", want: LaneSpec{Name: "ext4:inode_size=128", FS: "ext4", InodeSize: 128, SizeMiB: 8}},
		{in: "ext4:size=64", want: LaneSpec{Name: "ext4:size=64", FS: "ext4", InodeSize: 256, SizeMiB: 64}},
		{in: "ext4:name=new:inode_size=512:size=32:block_size=1024",
			want: LaneSpec{Name: "new", FS: "ext4", InodeSize: 512, SizeMiB: 32, Options: map[string]string{"block_size": "1024"}}},
		{in: "vfat:fat=32:size=64", want: LaneSpec{Name: "vfat:fat=32:size=64", FS: "vfat", SizeMiB: 64, Options: map[string]string{"fat": "32"}}},
		{in: "btrfs", want: LaneSpec{Name: "btrfs", FS: "btrfs", SizeMiB: 32, Options: map[string]string{"mixed": "1"}}},
		{in: "btrfs:size=16", want: LaneSpec{Name: "btrfs:size=16", FS: "btrfs", SizeMiB: 16, Options: map[string]string{"mixed": "1"}}},
		{in: "btrfs:mixed=0:size=128:name=b", want: LaneSpec{Name: "b", FS: "btrfs", SizeMiB: 128, Options: map[string]string{"mixed": "0"}}},
		{in: "btrfs:size=15", wantErr: "at least 16 MiB with mixed=1"},
		{in: "btrfs:mixed=0", wantErr: "at least 109 MiB with mixed=0"},
		{in: "btrfs:mixed=2", wantErr: "mixed=2: want 0 or 1"},
		{in: "btrfs:inode_size=256", wantErr: `unknown option "inode_size" for btrfs`},
		{in: "xfs", want: LaneSpec{Name: "xfs", FS: "xfs", SizeMiB: 300, Options: map[string]string{"bigtime": "1"}}},
		{in: "xfs:bigtime=0:size=400", want: LaneSpec{Name: "xfs:bigtime=0:size=400", FS: "xfs", SizeMiB: 400, Options: map[string]string{"bigtime": "0"}}},
		{in: "xfs:size=299", wantErr: "mkfs.xfs needs at least 300 MiB"},
		{in: "xfs:bigtime=2", wantErr: "bigtime=2: want 0 or 1"},
		{in: "exfat", want: LaneSpec{Name: "exfat", FS: "exfat", SizeMiB: 16}},
		{in: "udf:size=32", want: LaneSpec{Name: "udf:size=32", FS: "udf", SizeMiB: 32}},
		{in: "udf:seed=1", wantErr: `unknown option "seed" for udf`},
		{in: "ext4:mixed=1", wantErr: `unknown option "mixed"`},
		{in: "overlay", want: LaneSpec{Name: "overlay", FS: "overlay", SizeMiB: 8}},
		{in: "overlay:name=ov:size=16", want: LaneSpec{Name: "ov", FS: "overlay", SizeMiB: 16}},
		{in: "overlay:inode_size=256", wantErr: `unknown option "inode_size" for overlay`},
		{in: "ntfs", wantErr: `unknown filesystem "ntfs"`},
		{in: "", wantErr: "unknown filesystem"},
		{in: "ext2:journal=1", wantErr: `unknown option "journal"`},
		{in: "vfat:inode_size=128", wantErr: `unknown option "inode_size" for vfat`},
		{in: "ext2:fat=16", wantErr: `unknown option "fat"`},
		{in: "ext2:inode_size", wantErr: "not key=value"},
		{in: "ext2:inode_size=", wantErr: "not key=value"},
		{in: "ext2:inode_size=100", wantErr: "power of two"},
		{in: "ext2:inode_size=8192", wantErr: "power of two"},
		{in: "ext2:inode_size=abc", wantErr: "not a number"},
		{in: "ext2:size=0", wantErr: "size=0"},
		{in: "ext2:block_size=512", wantErr: "block_size=512"},
		{in: "ext2:block_size=1024:inode_size=2048", wantErr: "exceeds block_size"},
		{in: "ext2:size=8:size=9", wantErr: "given twice"},
		{in: "ext2:name=a/b", wantErr: "lane name"},
		{in: "ext2:name=..", wantErr: "invalid lane name"},
		{in: "vfat:fat=24", wantErr: "fat=24"},
		{in: "ext2:seed=1", want: LaneSpec{Name: "ext2:seed=1", FS: "ext2", InodeSize: 128, SizeMiB: 8, Options: map[string]string{"seed": "1"}}},
		{in: "ext4:seed=3:name=e", want: LaneSpec{Name: "e", FS: "ext4", InodeSize: 256, SizeMiB: 8, Options: map[string]string{"seed": "3"}}},
		{in: "ext3:seed=0", want: LaneSpec{Name: "ext3:seed=0", FS: "ext3", InodeSize: 256, SizeMiB: 8}},
		{in: "overlay:seed=2", want: LaneSpec{Name: "overlay:seed=2", FS: "overlay", SizeMiB: 8, Options: map[string]string{"seed": "2"}}},
		{in: "ext2:seed=4", wantErr: "seed=4: want 0 (empty) to 3"},
		{in: "ext2:seed=-1", wantErr: "seed=-1: want 0 (empty) to 3"},
		{in: "ext2:seed=x", wantErr: `option seed="x" is not a number`},
		{in: "vfat:seed=1", wantErr: `unknown option "seed" for vfat (accepted: name, size, fat)`},
		{in: "btrfs:seed=1", wantErr: `unknown option "seed" for btrfs`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLaneSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "guest: ") {
					t.Fatalf("ParseLaneSpec(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLaneSpec(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseLaneSpec(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestLaneSpecGrammar: a lane name is [A-Za-z0-9._+-]{1,64} (a spec
// without name= is its own name, ':' and '=' besides) and every field of a
// spec keeps to its grammar: nothing that a shell or a C compiler reads as
// code reaches an exported reproducer.
func TestLaneSpecGrammar(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 65)
	tests := []struct {
		in      string
		want    string // the lane name; "" when refused
		wantErr string // the field the error names
	}{
		{in: "ext2:name=x$(id)", wantErr: `name=: invalid lane name "x$(id)"`},
		{in: "ext2:name=a\nb", wantErr: `name=: invalid lane name "a\nb"`},
		{in: "ext2:name=${IFS}", wantErr: `name=: invalid lane name "${IFS}"`},
		{in: "ext2:name=a b", wantErr: `name=: invalid lane name "a b"`},
		{in: "ext2:name=" + long, wantErr: "name=: invalid lane name"},
		{in: "ext2:name=`id`", wantErr: "name=: invalid lane name \"`id`\""},
		{in: "ext2:name=a;b", wantErr: `name=: invalid lane name "a;b"`},
		{in: "ext2:name=a'b", wantErr: "name=: invalid lane name"},
		{in: "ext2:name=a\"b", wantErr: "name=: invalid lane name"},
		{in: "ext2:name=a*/b", wantErr: "name=: invalid lane name"},
		{in: "ext2:name=a\\b", wantErr: "name=: invalid lane name"},
		{in: "ext2:name=.", wantErr: "name=: invalid lane name"},
		{in: "ext2:name=é", wantErr: "name=: invalid lane name"},
		{in: "ext2:size=\n64", wantErr: "size"},
		{in: "ext2:size= 64", wantErr: "size"},
		{in: "ext2: size=64", wantErr: `unknown option " size"`},
		{in: "ext2:size=8\n:seed=1", wantErr: "size"},
		{in: "ext2:size=0000000000000000000000000000000000000000000000000000008", wantErr: "name: the spec is the lane's name"},
		{in: "ext2\n:size=8", wantErr: "unknown filesystem"},
		{in: "ext2:name=" + long[:64], want: long[:64]},
		{in: "ext2:name=ext2-b", want: "ext2-b"},
		{in: "ext4:name=A.b_c+d-9", want: "A.b_c+d-9"},
		{in: "ext4:inode_size=128", want: "ext4:inode_size=128"},
		{in: "overlay", want: "overlay"},
		{in: "btrfs:mixed=0:size=128", want: "btrfs:mixed=0:size=128"},
		{in: " ext2 ", want: "ext2"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLaneSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseLaneSpec(%q) = %+v, %v; want an error naming %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Name != tt.want {
				t.Fatalf("ParseLaneSpec(%q) = %+v, %v; want name %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestLaneSpecString(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"ext2", "ext2:inode_size=128:size=8"},
		{"ext2:inode_size=128:size=8", "ext2:inode_size=128:size=8"},
		{"ext2:name=x", "ext2:inode_size=128:size=8"},
		{"ext4:size=64:block_size=4096", "ext4:inode_size=256:size=64:block_size=4096"},
		{"vfat", "vfat:size=16"},
		{"vfat:fat=12", "vfat:size=16:fat=12"},
		{"overlay:name=ov", "overlay:size=8"},
		{"btrfs", "btrfs:size=32:mixed=1"},
		{"xfs", "xfs:size=300:bigtime=1"},
		{"btrfs:mixed=1:size=32", "btrfs:size=32:mixed=1"},
		{"btrfs:mixed=0:size=200", "btrfs:size=200:mixed=0"},
		{"ext2:seed=1", "ext2:inode_size=128:size=8:seed=1"},
		{"ext2:seed=0", "ext2:inode_size=128:size=8"},
		{"overlay:seed=1:size=16", "overlay:size=16:seed=1"},
	}
	for _, tt := range tests {
		spec, err := ParseLaneSpec(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.String(); got != tt.want {
			t.Errorf("ParseLaneSpec(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		// The canonical form parses back to the same image settings.
		back, err := ParseLaneSpec(spec.String())
		if err != nil {
			t.Fatal(err)
		}
		if back.String() != spec.String() {
			t.Errorf("round trip of %q: %q", tt.in, back.String())
		}
	}
}

func TestParseLaneSpecs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		wantNames []string
		wantErr   string
	}{
		{in: "ext2", wantNames: []string{"ext2"}},
		{in: "ext2,ext4", wantNames: []string{"ext2", "ext4"}},
		{in: "ext2, ext2:inode_size=256 ,vfat", wantNames: []string{"ext2", "ext2:inode_size=256", "vfat"}},
		{in: "ext2:name=a,ext2:name=b", wantNames: []string{"a", "b"}},
		{in: "ext2,ext2", wantErr: `duplicate lane name "ext2"`},
		{in: "ext2:name=x,ext4:name=x", wantErr: `duplicate lane name "x"`},
		{in: "ext2,,ext4", wantErr: "unknown filesystem"},
		{in: "ext2,btrfs", wantNames: []string{"ext2", "btrfs"}},
		{in: "ext2,zfs", wantErr: `unknown filesystem "zfs"`},
		{in: " ", wantErr: "empty lane spec list"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLaneSpecs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseLaneSpecs(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			if !reflect.DeepEqual(names, tt.wantNames) {
				t.Errorf("names = %q, want %q", names, tt.wantNames)
			}
		})
	}
}

func TestLaneSpecLayer(t *testing.T) {
	t.Parallel()
	ov, err := ParseLaneSpec("overlay:name=ov:size=16")
	if err != nil {
		t.Fatal(err)
	}
	if !ov.IsOverlay() {
		t.Error("overlay spec: IsOverlay false")
	}
	got := ov.Layer()
	want := LaneSpec{Name: "ov", FS: "ext2", InodeSize: 128, SizeMiB: 16}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Layer() = %+v, want %+v", got, want)
	}
	// Each layer is the very image of an ext2 lane of the same size.
	ext2, err := ParseLaneSpec("ext2:size=16")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != ext2.String() {
		t.Errorf("layer %s, ext2 lane %s: want the same base image", got, ext2)
	}
	if ext2.IsOverlay() || !reflect.DeepEqual(ext2.Layer(), ext2) {
		t.Errorf("ext2 spec: IsOverlay %v, Layer %+v", ext2.IsOverlay(), ext2.Layer())
	}
}

// TestLaneSpecLower checks an overlay lane's two layers: the upper one is
// always the empty ext2, the lower one carries the seed and is the very
// image of an ext2 lane with that seed.
func TestLaneSpecLower(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, upper, lower string }{
		{"overlay", "ext2:inode_size=128:size=8", "ext2:inode_size=128:size=8"},
		{"overlay:seed=1", "ext2:inode_size=128:size=8", "ext2:inode_size=128:size=8:seed=1"},
		{"overlay:seed=3:size=16:name=ov", "ext2:inode_size=128:size=16", "ext2:inode_size=128:size=16:seed=3"},
		{"ext4:seed=2", "ext4:inode_size=256:size=8:seed=2", "ext4:inode_size=256:size=8:seed=2"},
	}
	for _, tt := range tests {
		spec, err := ParseLaneSpec(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.Layer().String(); got != tt.upper {
			t.Errorf("%s: Layer() = %s, want %s", tt.spec, got, tt.upper)
		}
		if got := spec.Lower().String(); got != tt.lower {
			t.Errorf("%s: Lower() = %s, want %s", tt.spec, got, tt.lower)
		}
		if spec.Lower().IsOverlay() || spec.Lower().Name != spec.Name {
			t.Errorf("%s: Lower() = %+v, want a plain lane of the same name", tt.spec, spec.Lower())
		}
	}
	ov, _ := ParseLaneSpec("overlay:seed=1")
	ext2, _ := ParseLaneSpec("ext2:seed=1")
	if ov.Lower().String() != ext2.String() {
		t.Errorf("overlay:seed=1's lower layer %s, ext2:seed=1 %s: want the same base image", ov.Lower(), ext2)
	}
}

func TestSeedTree(t *testing.T) {
	t.Parallel()
	if got := SeedTree(0); got != nil {
		t.Errorf("SeedTree(0) = %v, want nil", got)
	}
	paths := func(n int) []string {
		var ps []string
		for _, e := range SeedTree(n) {
			p := e.Path
			if e.Dir {
				p += "/"
			}
			ps = append(ps, p)
		}
		return ps
	}
	tests := map[int][]string{
		1: {"f-00", "f-01", "d-00/", "d-01/", "d-00/f-00"},
		2: {"f-00", "f-01", "f-02", "d-00/", "d-01/", "d-00/f-00", "d-00/f-01", "d-00/d-00/"},
		3: {"f-00", "f-01", "f-02", "d-00/", "d-01/", "d-00/f-00", "d-00/f-01", "d-00/f-02", "d-00/d-00/", "d-00/d-01/"},
	}
	for n, want := range tests {
		if got := paths(n); !reflect.DeepEqual(got, want) {
			t.Errorf("SeedTree(%d) = %q, want %q", n, got, want)
		}
	}
	seen := map[string]bool{"": true}
	for _, e := range SeedTree(MaxSeed) {
		parent := e.Path[:max(0, strings.LastIndexByte(e.Path, '/'))]
		if !seen[parent] {
			t.Errorf("%s comes before its parent", e.Path)
		}
		seen[e.Path] = true
		switch {
		case e.Dir && (e.Mode != 0o755 || e.Data != nil):
			t.Errorf("%s: dir mode %o data %d bytes", e.Path, e.Mode, len(e.Data))
		case !e.Dir && (e.Mode != 0o644 || !strings.HasPrefix(string(e.Data), e.Path+"\n")):
			t.Errorf("%s: file mode %o data %.20q", e.Path, e.Mode, e.Data)
		}
	}
	if f := SeedTree(1)[1]; f.Path != "f-01" || len(f.Data) != 2000 {
		t.Errorf("SeedTree(1)[1] = %s with %d bytes, want f-01 with 2000", f.Path, len(f.Data))
	}
	if !reflect.DeepEqual(SeedTree(2), SeedTree(2)) || reflect.DeepEqual(SeedTree(1), SeedTree(2)) {
		t.Error("SeedTree is not a function of n")
	}
}

func TestFlavors(t *testing.T) {
	t.Parallel()
	specs, err := ParseLaneSpecs("ext2,btrfs")
	if err != nil {
		t.Fatal(err)
	}
	if got := FlavorOf(specs); got != FlavorCloud {
		t.Errorf("ext2,btrfs boot %s, want cloud", got)
	}
	specs, err = ParseLaneSpecs("ext2,f2fs,minix")
	if err != nil {
		t.Fatal(err)
	}
	if got := FlavorOf(specs); got != FlavorGeneric || specs[0].Flavor() != FlavorCloud || specs[1].Flavor() != FlavorGeneric {
		t.Errorf("ext2,f2fs,minix boot %s (lanes %s, %s), want generic", got, specs[0].Flavor(), specs[1].Flavor())
	}
	if FlavorName("") != FlavorCloud || FlavorName(FlavorGeneric) != FlavorGeneric {
		t.Error("FlavorName")
	}
	if _, _, err := flavorOf("rt"); err == nil || !strings.Contains(err.Error(), `unknown kernel flavor "rt"`) {
		t.Errorf("flavorOf(rt) = %v", err)
	}
	for _, m := range genericModules {
		if !slices.Contains(DefaultModulesFor(FlavorGeneric), m) || slices.Contains(DefaultModulesFor(FlavorCloud), m) {
			t.Errorf("module %s: want it in the generic defaults only", m)
		}
	}
	for flavor, pkg := range map[string]string{FlavorCloud: "linux-image-6.1.0-57-cloud-amd64", FlavorGeneric: "linux-image-6.1.0-57-amd64"} {
		for other, kf := range kernelFlavors {
			if got := kf.pkg.MatchString(pkg); got != (other == flavor) {
				t.Errorf("flavour %s's pattern matches %s: %v", other, pkg, got)
			}
		}
	}
}

// FuzzParseLaneSpec: whatever a spec holds, an accepted one has a name of
// the lane-name grammar (':' '=' besides for a spec that is its own name).
func FuzzParseLaneSpec(f *testing.F) {
	for _, s := range []string{"ext2", "ext4:inode_size=128", "ext2:name=b", "btrfs:mixed=0:size=128", "ext2:name=x$(id)", "ext2:size=\n8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseLaneSpec(s)
		if err != nil {
			return
		}
		if !defaultName.MatchString(spec.Name) || spec.Name == "." || spec.Name == ".." {
			t.Errorf("ParseLaneSpec(%q): name %q outside the grammar", s, spec.Name)
		}
	})
}
