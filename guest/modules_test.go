package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestResolveModulesFakeTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFakeTree(t, dir, map[string]string{
		"fs/a.ko":           "b,c",
		"fs/b.ko":           "c",
		"drivers/c.ko":      "",
		"drivers/x-y.ko":    "c",
		"drivers/z.ko":      "x_y,a",
		"loop/cyc1.ko":      "cyc2",
		"loop/cyc2.ko":      "cyc3",
		"loop/cyc3.ko":      "cyc1",
		"broken/needy.ko":   "c,not_there",
		"broken/selfish.ko": "selfish",
	})
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\nkernel/fs/jbd2/jbd2.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	idx, err := indexModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		wanted  []string
		want    []string
		wantErr string
	}{
		{wanted: []string{"c"}, want: []string{"c"}},
		{wanted: []string{"a"}, want: []string{"c", "b", "a"}},
		{wanted: []string{"b", "a"}, want: []string{"c", "b", "a"}},
		{wanted: []string{"a", "a", "c"}, want: []string{"c", "b", "a"}},
		{wanted: []string{"x-y"}, want: []string{"c", "x_y"}},
		{wanted: []string{"x_y"}, want: []string{"c", "x_y"}},
		{wanted: []string{"z"}, want: []string{"c", "x_y", "b", "a", "z"}},
		{wanted: []string{"z.ko"}, want: []string{"c", "x_y", "b", "a", "z"}},
		{wanted: []string{"cyc1"}, wantErr: "cycle: cyc1 -> cyc2 -> cyc3 -> cyc1"},
		{wanted: []string{"selfish"}, wantErr: "cycle: selfish -> selfish"},
		{wanted: []string{"needy"}, wantErr: `module "not_there" (needed by needy) not found`},
		{wanted: []string{"nope"}, wantErr: `module "nope" not found`},
		{wanted: []string{"ext4"}, wantErr: `module "ext4" is built into the kernel`},
		{wanted: []string{""}, wantErr: "empty module name"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.wanted, ","), func(t *testing.T) {
			mods, err := resolveModules(context.Background(), idx, tt.wanted)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("resolveModules(%q) err = %v, want %q", tt.wanted, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range mods {
				got = append(got, m.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("resolveModules(%q) = %q, want %q", tt.wanted, got, tt.want)
			}
			checkTopological(t, mods)
		})
	}
}

// checkTopological is the naive model: every dependency appears earlier.
func checkTopological(t *testing.T, mods []*module) {
	t.Helper()
	pos := make(map[string]int)
	for i, m := range mods {
		pos[m.Name] = i
	}
	for i, m := range mods {
		for _, d := range m.Depends {
			if j, ok := pos[d]; !ok || j >= i {
				t.Errorf("%s (at %d) depends on %s (at %d, present %v)", m.Name, i, d, j, ok)
			}
		}
	}
}

func TestIndexModulesDuplicate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFakeTree(t, dir, map[string]string{"a/foo-bar.ko": "", "b/foo_bar.ko": ""})
	if _, err := indexModules(dir); err == nil || !strings.Contains(err.Error(), "found twice") {
		t.Errorf("err = %v, want found twice", err)
	}
	if _, err := indexModules(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no kernel modules") {
		t.Errorf("empty tree: err = %v", err)
	}
}

func TestResolveCompressedModules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFakeTree(t, dir, map[string]string{"m/top.ko": "", "m/dep.ko": ""})
	for tool, name := range map[string]string{"xz": "top", "zstd": "dep"} {
		bin, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("skipping: %s not installed", tool)
		}
		p := filepath.Join(dir, "kernel", "m", name+".ko")
		if out, err := exec.Command(bin, "-q", p).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", tool, err, out)
		}
		if tool == "zstd" {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// top depends on dep: rewrite top with that dependency and compress again.
	top := filepath.Join(dir, "kernel", "m", "top.ko")
	if err := os.Remove(top + ".xz"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(top, fakeModule(t, "depends=dep", "name=top"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("xz", "-q", top).CombinedOutput(); err != nil {
		t.Fatalf("xz: %v: %s", err, out)
	}
	idx, err := indexModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := resolveModules(context.Background(), idx, []string{"top"})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Name != "dep" || mods[1].Name != "top" {
		t.Fatalf("order = %+v, want dep, top", mods)
	}
	for _, m := range mods {
		if _, err := modinfo(m.Data); err != nil {
			t.Errorf("%s not decompressed: %v", m.Path, err)
		}
		if m.FileName() != m.Name+".ko" {
			t.Errorf("FileName = %q", m.FileName())
		}
	}
}

func TestModinfoErrors(t *testing.T) {
	t.Parallel()
	if _, err := modinfo([]byte("not elf")); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("non-ELF: err = %v", err)
	}
	if _, err := modinfo(fakeModule(t, "novalue")); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("malformed field: err = %v", err)
	}
	got, err := moduleDepends(fakeModule(t, "alias=x", "depends=a-b, c", "depends=", "name=z"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_b", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("depends = %q, want %q", got, want)
	}
}

func FuzzModinfo(f *testing.F) {
	f.Add([]byte("\x7fELF"))
	f.Add(fakeModule(f, "depends=a,b", "name=x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := modinfo(b)
		if err != nil {
			return
		}
		for _, f := range kv {
			if f[0] == "" && f[1] == "" {
				t.Errorf("empty field accepted")
			}
		}
	})
}

// TestRealModinfo reads .modinfo from the real cloud kernel's modules.
func TestRealModinfo(t *testing.T) {
	kt := realTree(t)
	idx, err := indexModules(kt.ModulesDir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		deps []string
	}{
		{"virtio_pci", []string{"virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio"}},
		{"virtio_blk", []string{"virtio", "virtio_ring"}},
		{"virtio_console", []string{"virtio", "virtio_ring"}},
		{"virtio", []string{"virtio_ring"}},
		{"vfat", []string{"fat"}},
		{"fat", nil},
		{"overlay", nil},
	}
	for _, tt := range tests {
		p, ok := idx.files[tt.name]
		if !ok {
			t.Errorf("%s not in %s", tt.name, kt.ModulesDir)
			continue
		}
		data, err := readModuleFile(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := modinfo(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		fields := make(map[string]string)
		for _, f := range kv {
			fields[f[0]] = f[1]
		}
		if fields["name"] != tt.name {
			t.Errorf("%s: name=%q", p, fields["name"])
		}
		if !strings.HasPrefix(fields["vermagic"], kt.Version+" ") {
			t.Errorf("%s: vermagic=%q, want prefix %q", p, fields["vermagic"], kt.Version)
		}
		deps, err := moduleDepends(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(deps, tt.deps) {
			t.Errorf("%s: depends %q, want %q", tt.name, deps, tt.deps)
		}
	}
	// ext4 is built in; asking for it says so.
	if _, err := resolveModules(context.Background(), idx, []string{"ext4"}); err == nil || !strings.Contains(err.Error(), "built into the kernel") {
		t.Errorf("ext4: err = %v", err)
	}
	if _, err := resolveModules(context.Background(), idx, []string{"virtio_nonesuch"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing module: err = %v", err)
	}
	mods, err := resolveModules(context.Background(), idx, DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	checkTopological(t, mods)
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	t.Logf("load order: %s", strings.Join(names, " "))
}

func TestLazySplit(t *testing.T) {
	mk := func(names ...string) []*module {
		var out []*module
		for _, n := range names {
			name, deps, _ := strings.Cut(n, ":")
			m := &module{Name: name}
			if deps != "" {
				m.Depends = strings.Split(deps, "+")
			}
			out = append(out, m)
		}
		return out
	}
	all := mk("virtio_ring", "virtio", "virtio_blk", "libcrc32c", "xor", "btrfs:xor+libcrc32c", "cdrom", "crc_itu_t", "udf:cdrom+crc_itu_t", "xfs:libcrc32c", "exfat")
	boot := mk("virtio_ring", "virtio", "virtio_blk", "libcrc32c")
	markLazy(all, boot)
	var lazy []string
	lazyFor := make(map[string][]string)
	for _, m := range all {
		if m.Lazy {
			lazy = append(lazy, m.Name)
		}
		for _, f := range m.For {
			lazyFor[f] = append(lazyFor[f], m.Name)
		}
	}
	if want := []string{"xor", "btrfs", "cdrom", "crc_itu_t", "udf", "xfs", "exfat"}; !reflect.DeepEqual(lazy, want) {
		t.Errorf("lazy = %v, want %v (shared dependencies stay at boot)", lazy, want)
	}
	want := map[string][]string{"btrfs": {"xor", "btrfs"}, "udf": {"cdrom", "crc_itu_t", "udf"}, "xfs": {"xfs"}, "exfat": {"exfat"}}
	if !reflect.DeepEqual(lazyFor, want) {
		t.Errorf("per filesystem = %v, want %v (each lists only what it needs, in load order)", lazyFor, want)
	}
	if got := withoutLazy([]string{"virtio-blk", "btrfs", "vfat", "xfs"}); !reflect.DeepEqual(got, []string{"virtio-blk", "vfat"}) {
		t.Errorf("withoutLazy = %v", got)
	}
}
