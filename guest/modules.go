package guest

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/themisfs/themis/internal/hosttool"
)

// DefaultModules are the modules the guest loads when Options.Modules is
// empty; their dependencies are added automatically. ext2/ext4 need none:
// the cloud kernel has ext4 built in and serves ext2 with it. btrfs brings
// zstd_compress, raid6_pq, xor and libcrc32c (crc32c itself is built in).
// xfs brings libcrc32c; udf brings cdrom and crc_itu_t; exfat needs none.
var DefaultModules = []string{"virtio_pci", "virtio_blk", "virtio_console", "vfat", "nls_cp437", "nls_ascii", "overlay", "btrfs", "xfs", "exfat", "udf"}

// LazyModules are wanted modules the guest does not load at boot: they and
// the dependencies only they need go to /modules/lazy (all of them) and
// /modules/lazy.<name> (one's, in load order), which the agent loads the
// first time a mount of filesystem <name> fails with ENODEV (btrfs and its
// four dependencies cost about a second of every boot otherwise, xfs as
// much). Each is named like its filesystem type.
var LazyModules = []string{"btrfs", "xfs", "exfat", "udf", "f2fs", "minix", "nilfs2"}

// genericModules are what the generic flavour's image adds to
// DefaultModules: ext4 (a module there; it serves the ext2 and ext3 lanes
// too) with the crc32c its checksums use, the crc32 f2fs asks for by name
// (a softdep, which module resolution does not follow; the cloud kernel
// has both built in), and the filesystems only it has.
var genericModules = []string{"crc32c_generic", "crc32_generic", "ext4", "f2fs", "minix", "nilfs2"}

// DefaultModulesFor returns the default modules of a kernel flavour
// (FlavorCloud or "": DefaultModules).
func DefaultModulesFor(flavor string) []string {
	if flavor == FlavorGeneric {
		return append(append([]string(nil), DefaultModules...), genericModules...)
	}
	return DefaultModules
}

// moduleSuffixes are the file name endings of kernel modules, plain first.
// Debian bookworm's cloud kernel ships plain .ko files; later kernels ship
// .ko.xz or .ko.zst, which are decompressed with the xz or zstd tool.
var moduleSuffixes = []string{".ko", ".ko.xz", ".ko.zst"}

// normModName makes module names comparable: '-' and '_' are equal.
func normModName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// moduleIndex maps normalized module names to their files under a
// lib/modules/<version> tree, and knows which names are built in.
type moduleIndex struct {
	files    map[string]string
	builtin  map[string]bool
	override map[string][]byte // built modules packed instead of the tree's (uncompressed, stripped)
}

func indexModules(dir string) (*moduleIndex, error) {
	idx := &moduleIndex{files: make(map[string]string), builtin: make(map[string]bool)}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		for _, suf := range moduleSuffixes {
			if base, ok := strings.CutSuffix(d.Name(), suf); ok {
				name := normModName(base)
				if prev, dup := idx.files[name]; dup {
					return fmt.Errorf("module %s found twice: %s and %s", name, prev, p)
				}
				idx.files[name] = p
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("guest: index modules in %s: %w", dir, err)
	}
	if len(idx.files) == 0 {
		return nil, fmt.Errorf("guest: no kernel modules (*.ko, *.ko.xz, *.ko.zst) under %s", dir)
	}
	// modules.builtin lists built-in modules as paths ("kernel/fs/ext4/ext4.ko");
	// it only improves error messages, so a missing file is fine.
	b, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	switch {
	case err == nil:
		for _, line := range strings.Split(string(b), "\n") {
			if base := filepath.Base(strings.TrimSpace(line)); strings.HasSuffix(base, ".ko") {
				idx.builtin[normModName(strings.TrimSuffix(base, ".ko"))] = true
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("guest: read modules.builtin: %w", err)
	}
	return idx, nil
}

// module is one resolved kernel module.
type module struct {
	Name    string   // normalized name, e.g. "virtio_ring"
	Path    string   // source file
	Data    []byte   // uncompressed ELF object
	Depends []string // normalized names from .modinfo depends=
	Lazy    bool     // loaded on first need (/modules/lazy), not at boot
	For     []string // the LazyModules that need it (/modules/lazy.<name>), when Lazy
}

// FileName is the module's name inside the initramfs.
func (m *module) FileName() string { return m.Name + ".ko" }

// readModuleFile returns the uncompressed bytes of a module file.
func readModuleFile(ctx context.Context, p string) ([]byte, error) {
	var tool string
	switch {
	case strings.HasSuffix(p, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(p, ".ko.zst"):
		tool = "zstd"
	default:
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("guest: read module: %w", err)
		}
		return b, nil
	}
	bin, err := exec.LookPath(tool)
	if err != nil {
		return nil, fmt.Errorf("guest: module %s is compressed and %s is not installed (Debian package %s): %w", p, tool, hosttool.Package(tool), err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-dc", p)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("guest: decompress module %s with %s: %w: %s", p, tool, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// readModule reads a module file, uncompressed and without debug info.
func readModule(ctx context.Context, p string) ([]byte, error) {
	data, err := readModuleFile(ctx, p)
	if err != nil {
		return nil, err
	}
	return stripIfDebug(ctx, data, p)
}

// modinfo returns the key=value pairs of an ELF kernel module's .modinfo
// section, in order. Keys may repeat (alias=, parm=), hence the slice.
func modinfo(data []byte) ([][2]string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("guest: modinfo: not an ELF object: %w", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("guest: modinfo: no .modinfo section")
	}
	raw, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("guest: modinfo: read .modinfo: %w", err)
	}
	var kv [][2]string
	for _, field := range bytes.Split(raw, []byte{0}) {
		if len(field) == 0 {
			continue // padding between strings
		}
		k, v, ok := bytes.Cut(field, []byte{'='})
		if !ok {
			return nil, fmt.Errorf("guest: modinfo: malformed field %q", field)
		}
		kv = append(kv, [2]string{string(k), string(v)})
	}
	return kv, nil
}

// moduleDepends returns the normalized names in a module's depends= field.
func moduleDepends(data []byte) ([]string, error) {
	kv, err := modinfo(data)
	if err != nil {
		return nil, err
	}
	var deps []string
	for _, f := range kv {
		if f[0] != "depends" {
			continue
		}
		for _, d := range strings.Split(f[1], ",") {
			if d = strings.TrimSpace(d); d != "" {
				deps = append(deps, normModName(d))
			}
		}
	}
	return deps, nil
}

// resolveModules finds the wanted modules and, recursively, their
// dependencies, and returns them in load order: every module after all of
// its dependencies, otherwise in the order first wanted. It fails on a name
// the tree lacks (saying who needed it) and on a dependency cycle.
func resolveModules(ctx context.Context, idx *moduleIndex, wanted []string) ([]*module, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := make(map[string]int)
	loaded := make(map[string]*module)
	var order []*module
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("guest: module dependency cycle: %s", strings.Join(append(path, name), " -> "))
		}
		file, ok := idx.files[name]
		data, built := idx.override[name]
		if built {
			file, ok = "built:"+name, true
		}
		if !ok {
			if idx.builtin[name] {
				return fmt.Errorf("guest: module %q is built into the kernel; do not list it", name)
			}
			if len(path) == 0 {
				return fmt.Errorf("guest: module %q not found in the kernel's module tree%s", name, suggestModules(idx, name))
			}
			return fmt.Errorf("guest: module %q (needed by %s) not found in the kernel's module tree", name, strings.Join(path, " -> "))
		}
		state[name] = visiting
		if !built {
			var err error
			if data, err = readModule(ctx, file); err != nil {
				return err
			}
		}
		deps, err := moduleDepends(data)
		if err != nil {
			return fmt.Errorf("%w (module %s)", err, file)
		}
		for _, d := range deps {
			if err := visit(d, append(path[:len(path):len(path)], name)); err != nil {
				return err
			}
		}
		state[name] = done
		m := &module{Name: name, Path: file, Data: data, Depends: deps}
		loaded[name] = m
		order = append(order, m)
		return nil
	}
	for _, w := range wanted {
		name := normModName(strings.TrimSpace(w))
		for _, suf := range moduleSuffixes {
			name = strings.TrimSuffix(name, suf)
		}
		if name == "" {
			return nil, fmt.Errorf("guest: empty module name in %q", wanted)
		}
		if err := visit(name, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// suggestModules names up to five modules whose names look like want
// (ignoring underscores), for an error message.
func suggestModules(idx *moduleIndex, want string) string {
	squash := func(s string) string { return strings.ReplaceAll(s, "_", "") }
	w := squash(want)
	var near []string
	for n := range idx.files {
		if s := squash(n); strings.Contains(s, w) || len(s) > 3 && strings.Contains(w, s) && len(s)*2 > len(w) {
			near = append(near, n)
		}
	}
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	if len(near) > 5 {
		near = near[:5]
	}
	return " (similar: " + strings.Join(near, ", ") + ")"
}

// markLazy sets Lazy on the modules in mods (the resolved wanted list) that
// only LazyModules need: boot is the resolution of wanted without them.
func markLazy(mods, boot []*module) {
	need := make(map[string]bool, len(boot))
	for _, m := range boot {
		need[m.Name] = true
	}
	byName := make(map[string]*module, len(mods))
	for _, m := range mods {
		m.Lazy = !need[m.Name]
		m.For = nil
		byName[m.Name] = m
	}
	for _, root := range LazyModules {
		root = normModName(root)
		if byName[root] == nil {
			continue
		}
		seen := make(map[string]bool)
		var mark func(name string)
		mark = func(name string) {
			m := byName[name]
			if m == nil || seen[name] || !m.Lazy {
				return
			}
			seen[name] = true
			m.For = append(m.For, root)
			for _, d := range m.Depends {
				mark(d)
			}
		}
		mark(root)
	}
}

// withoutLazy returns wanted minus LazyModules ('-' and '_' equal).
func withoutLazy(wanted []string) []string {
	lazy := make(map[string]bool)
	for _, n := range LazyModules {
		lazy[strings.ReplaceAll(n, "-", "_")] = true
	}
	var out []string
	for _, n := range wanted {
		if !lazy[strings.ReplaceAll(n, "-", "_")] {
			out = append(out, n)
		}
	}
	return out
}

// KernelModules returns the modules (files and built-ins, names
// normalized) of the newest kernel of a flavour unpacked in cacheDir's
// kernel cache and its version; ok is false when none is cached yet.
func KernelModules(cacheDir, flavor string) (mods map[string]bool, version string, ok bool) {
	_, kf, err := flavorOf(flavor)
	if err != nil {
		return nil, "", false
	}
	dirs, err := filepath.Glob(filepath.Join(cacheDir, "kernels", "*", "lib", "modules", "*"))
	if err != nil {
		return nil, "", false
	}
	var newest time.Time
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil || !st.ModTime().After(newest) || !kf.pkg.MatchString("linux-image-"+filepath.Base(d)) {
			continue
		}
		idx, err := indexModules(d)
		if err != nil {
			continue
		}
		mods = make(map[string]bool, len(idx.files)+len(idx.builtin))
		for n := range idx.files {
			mods[n] = true
		}
		for n := range idx.builtin {
			mods[n] = true
		}
		newest, version, ok = st.ModTime(), filepath.Base(d), true
	}
	return mods, version, ok
}
