package guest

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/themisfs/themis/internal/hosttool"
	"github.com/zeebo/blake3"
	"go.uber.org/zap"
)

// modBuildFormat versions the module build cache (<cache>/modbuild/<key>).
const modBuildFormat = "themis-modbuild/v1"

// Input is one thing an image was built from beyond the stock kernel: a
// patch or a module source directory, by name and content hash.
type Input struct {
	Name   string `json:"name"`   // the patch's file name, or the source directory's path
	BLAKE3 string `json:"blake3"` // of the patch bytes, or of the directory's files (paths and bytes)
}

// builtModules are the modules built for an image, by normalized name.
type builtModules struct {
	Data      map[string][]byte
	Patches   []Input
	PatchData [][]byte // the patches' bytes, as Patches
	Sources   []Input
}

// Names returns the built module names, sorted.
func (b *builtModules) Names() []string {
	return sortedKeys(b.Data)
}

// modBuild is one build request resolved: what goes into its cache key
// and what the scratch build needs.
type modBuild struct {
	tc      *toolchain
	patches [][]byte
	pfiles  []*patchFiles
	dirs    []string // fs/<dir> the patches touch
	srcs    []string // absolute module source directories
	out     *builtModules
}

// buildModules builds the modules of b (o's patches and module sources,
// readBuildInputs) against kt's headers, or takes them from the module
// build cache.
func buildModules(ctx context.Context, log *zap.Logger, o Options, cacheDir string, kt *kernelTree, idx *moduleIndex, b *modBuild) (*builtModules, error) {
	var err error
	if b.tc, err = resolveToolchain(ctx, log, o, cacheDir, kt, len(b.patches) > 0); err != nil {
		return nil, err
	}
	key, err := b.key()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(cacheDir, "modbuild")
	dir := filepath.Join(root, key)
	if data, err := readBuilt(dir); err == nil {
		b.out.Data = data
		log.Info("patched modules unchanged, cached at "+dir, zap.Strings("modules", b.out.Names()))
		return b.out, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		log.Warn("module build cache entry invalid; rebuilding", zap.String("dir", dir), zap.Error(err))
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	if strings.ContainsAny(root, " \t\n") {
		return nil, fmt.Errorf("guest: cache directory %q has whitespace, which kbuild cannot build in", cacheDir)
	}
	scratch, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(scratch)
	start := time.Now()
	if err := b.buildIn(ctx, log, scratch, idx, o.Flavor); err != nil {
		return nil, err
	}
	if err := writeBuilt(scratch, dir, b.out.Data); err != nil {
		return nil, err
	}
	log.Info("modules built", zap.Strings("modules", b.out.Names()), zap.Duration("took", time.Since(start)))
	return b.out, nil
}

// readBuildInputs reads and checks o's patches (bounded) and hashes o's
// module source directories.
func readBuildInputs(o Options) (*modBuild, error) {
	b := &modBuild{out: &builtModules{}}
	dirs := make(map[string]bool)
	for _, p := range o.Patches {
		data, err := readBoundedFile(p, maxPatchBytes)
		if err != nil {
			return nil, fmt.Errorf("guest: patch %s: %w", p, err)
		}
		pf, err := parsePatch(data)
		if err != nil {
			return nil, fmt.Errorf("guest: patch %s: %w", p, err)
		}
		b.patches, b.pfiles = append(b.patches, data), append(b.pfiles, pf)
		for _, d := range pf.Dirs {
			dirs[d] = true
		}
		sum := blake3.Sum256(data)
		b.out.Patches = append(b.out.Patches, Input{Name: filepath.Base(p), BLAKE3: hex.EncodeToString(sum[:])})
		b.out.PatchData = append(b.out.PatchData, data)
	}
	for d := range dirs {
		b.dirs = append(b.dirs, d)
	}
	sort.Strings(b.dirs)
	for _, s := range o.ModuleSrcs {
		abs, err := filepath.Abs(s)
		if err != nil {
			return nil, fmt.Errorf("guest: module source %s: %w", s, err)
		}
		sum, err := copyModuleSource(abs, "")
		if err != nil {
			return nil, err
		}
		b.srcs = append(b.srcs, abs)
		b.out.Sources = append(b.out.Sources, Input{Name: abs, BLAKE3: sum})
	}
	return b, nil
}

// resolveToolchain finds the headers tree, checks its release against the
// kernel's, and for patches finds, checks and extracts the kernel source.
func resolveToolchain(ctx context.Context, log *zap.Logger, o Options, cacheDir string, kt *kernelTree, patches bool) (*toolchain, error) {
	headers, err := headersDir(o, kt.Version)
	if err != nil {
		return nil, err
	}
	rel, err := utsRelease(headers)
	if err != nil {
		return nil, err
	}
	if rel != kt.Version {
		return nil, fmt.Errorf("guest: the headers at %s build for kernel %s, not %s: install linux-headers-%s", headers, rel, kt.Version, kt.Version)
	}
	tc := &toolchain{Headers: headers, Release: rel}
	if !patches {
		return tc, nil
	}
	if kt.Source == "" {
		return nil, errors.New("guest: --patch applies to a Debian kernel package's source; for your own kernel tree, patch and build it, then pass --kernel-tree (or --module-src DIR with it)")
	}
	debVer, err := debVersion(ctx, kt.Source)
	if err != nil {
		return nil, err
	}
	tarball, err := sourceTarball(o, debVer)
	if err != nil {
		return nil, err
	}
	if tc.Source, tc.SourceID, err = extractSource(ctx, log, tarball, cacheDir); err != nil {
		return nil, err
	}
	srcVer, err := makefileVersion(filepath.Join(tc.Source, "Makefile"))
	if err != nil {
		return nil, err
	}
	headersPkg := "linux-headers-" + kt.Version
	headersVer := ""
	if o.HeadersDir == "" {
		headersVer = installedVersion(ctx, headersPkg)
	}
	if err := checkVersions(srcVer, headersPkg, headersVer, debVer); err != nil {
		return nil, err
	}
	return tc, nil
}

// key hashes everything the built modules depend on: the headers tree's
// release, configuration and symbol versions, the source tarball, the
// patches in order and the module sources.
func (b *modBuild) key() (string, error) {
	h := blake3.New()
	field := func(s []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write(s)
	}
	field([]byte(modBuildFormat))
	field([]byte(b.tc.Release))
	for _, f := range []string{".config", "Module.symvers", "include/generated/autoconf.h"} {
		data, err := os.ReadFile(filepath.Join(b.tc.Headers, f))
		if err != nil {
			return "", fmt.Errorf("guest: headers %s: %w", b.tc.Headers, err)
		}
		s := blake3.Sum256(data)
		field(s[:])
	}
	field([]byte(b.tc.SourceID))
	for _, p := range b.out.Patches {
		field([]byte("patch:" + p.BLAKE3))
	}
	for _, s := range b.out.Sources {
		field([]byte("src:" + filepath.Base(s.Name) + ":" + s.BLAKE3))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// buildIn copies the sources into scratch, applies the patches, builds
// every directory's modules the kernel can load, strips them and checks
// their vermagic.
func (b *modBuild) buildIn(ctx context.Context, log *zap.Logger, scratch string, idx *moduleIndex, flavor string) error {
	var plans []dirPlan
	var dirs []string
	for _, d := range b.dirs {
		if err := copyTree(filepath.Join(b.tc.Source, filepath.FromSlash(d)), filepath.Join(scratch, filepath.FromSlash(d))); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("guest: %s is not in the kernel source (linux-source %s)", d, b.tc.Release)
			}
			return err
		}
		dirs = append(dirs, d)
	}
	for i, p := range b.patches {
		if err := applyPatch(ctx, scratch, p, b.out.Patches[i].Name); err != nil {
			return err
		}
	}
	for _, s := range b.srcs {
		d := "fs/" + filepath.Base(s)
		if slices.Contains(dirs, d) {
			return fmt.Errorf("guest: module source %s and another source or patch both build %s", s, d)
		}
		if _, err := copyModuleSource(s, filepath.Join(scratch, filepath.FromSlash(d))); err != nil {
			return err
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		mk, err := readBoundedFile(filepath.Join(scratch, filepath.FromSlash(d), "Makefile"), 1<<20)
		if err != nil {
			return fmt.Errorf("guest: %s: %w", d, err)
		}
		plans = append(plans, planDir(d, makefileModules(mk), idx))
	}
	if err := checkPlans(plans, b.tc.Release, flavor); err != nil {
		return err
	}
	b.out.Data = make(map[string][]byte)
	for _, p := range plans {
		if len(p.Build) == 0 {
			continue
		}
		if err := b.makeDir(ctx, log, scratch, p); err != nil {
			return err
		}
	}
	return nil
}

// applyPatch applies one patch in scratch with GNU patch, reading it from
// a file there (the bytes that were hashed), as a unified diff only (no ed
// scripts), never leaving backup or reject files.
func applyPatch(ctx context.Context, scratch string, patch []byte, name string) error {
	pf := filepath.Join(scratch, ".patch")
	if err := os.WriteFile(pf, patch, 0o600); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	defer os.Remove(pf)
	bin, err := hosttool.Look("patch")
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	out, err := hosttool.Output(ctx, scratch, append(os.Environ(), "LC_ALL=C"), bin,
		"-p1", "--batch", "--forward", "--unified", "--no-backup-if-mismatch", "--reject-file=-", "-i", pf)
	if err != nil {
		var te *hosttool.Error
		if errors.As(err, &te) {
			out = te.Stderr
		}
		return fmt.Errorf("guest: patch %s does not apply: %s", name, patchFailure(out))
	}
	return nil
}

// makeDir runs kbuild for one directory's modules and collects them.
func (b *modBuild) makeDir(ctx context.Context, log *zap.Logger, scratch string, p dirPlan) error {
	dir := filepath.Join(scratch, filepath.FromSlash(p.Dir))
	make, err := hosttool.Look("make")
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	args := []string{"-C", b.tc.Headers, "M=" + dir, fmt.Sprintf("-j%d", runtime.NumCPU()), "KCFLAGS=" + kcflags(scratch, dir)}
	for _, m := range p.Build {
		if m.Symbol != "" {
			args = append(args, "CONFIG_"+m.Symbol+"=m")
		}
	}
	args = append(args, "modules")
	log.Info("building modules", zap.String("dir", p.Dir), zap.String("against", b.tc.Headers))
	cmd := exec.CommandContext(ctx, make, args...)
	// kbuild unexports LC_ALL: LANG and LC_MESSAGES keep the compiler's
	// messages in plain ASCII for firstBuildError and the user.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "LC_MESSAGES=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("guest: build %s: %w", p.Dir, ctx.Err())
		}
		return fmt.Errorf("guest: %s does not build: %s", p.Dir, firstBuildError(string(out), scratch))
	}
	for _, m := range p.Build {
		data, err := stripModule(ctx, filepath.Join(dir, m.Obj+".ko"))
		if err != nil {
			return err
		}
		if err := checkVermagic(data, m.Name, b.tc.Release); err != nil {
			return err
		}
		b.out.Data[m.Name] = data
	}
	return nil
}

// kcflags maps the scratch directory out of the build (so __FILE__ reads
// fs/udf/namei.c and the module does not depend on where it was built)
// and puts the module directory and its subdirectories holding headers on
// the include path: in-tree Makefiles name them relative to the kernel
// tree ($(srctree)/$(src)/libxfs), which an out-of-tree build lacks.
func kcflags(scratch, dir string) string {
	flags := []string{"-ffile-prefix-map=" + scratch + "/=", "-I" + dir}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error { // best effort: a missed directory fails the compile, which says so
		if err == nil && d.IsDir() && p != dir {
			if hs, _ := filepath.Glob(filepath.Join(p, "*.h")); len(hs) > 0 {
				flags = append(flags, "-I"+p)
			}
		}
		return nil
	})
	return strings.Join(flags, " ")
}

// stripModule strips debug info from a built module, as Debian ships
// modules (xfs with debug info is 43 MB and its initramfs no longer fits
// guest RAM), and returns the bytes.
func stripModule(ctx context.Context, ko string) ([]byte, error) {
	if _, err := os.Stat(ko); err != nil {
		return nil, fmt.Errorf("guest: the build made no %s: %w", filepath.Base(ko), err)
	}
	out := ko + ".stripped"
	if _, err := hosttool.Run(ctx, "", "strip", "--strip-debug", "-o", out, ko); err != nil {
		return nil, fmt.Errorf("guest: strip %s: %w", filepath.Base(ko), err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	return data, nil
}

// checkVermagic checks a built module is for kernel release rel.
func checkVermagic(data []byte, name, rel string) error {
	kv, err := modinfo(data)
	if err != nil {
		return fmt.Errorf("%w (built module %s)", err, name)
	}
	for _, f := range kv {
		if f[0] == "vermagic" {
			if got := strings.Fields(f[1]); len(got) == 0 || got[0] != rel {
				return fmt.Errorf("guest: built %s.ko has vermagic %q, the kernel is %s: the headers do not match the kernel", name, f[1], rel)
			}
			return nil
		}
	}
	return fmt.Errorf("guest: built %s.ko has no vermagic", name)
}

// builtManifest is <cache>/modbuild/<key>/built.json.
type builtManifest struct {
	Format  string               `json:"format"`
	Modules map[string]fileEntry `json:"modules"`
}

// writeBuilt writes the built modules and their manifest (last) to a
// temporary directory under scratch's parent and renames it to dir.
func writeBuilt(scratch, dir string, data map[string][]byte) error {
	tmp := filepath.Join(scratch, ".out")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	m := builtManifest{Format: modBuildFormat, Modules: make(map[string]fileEntry)}
	for name, b := range data {
		if err := writeFileSync(filepath.Join(tmp, name+".ko"), b, 0o644); err != nil {
			return err
		}
		m.Modules[name] = entryOf(b)
	}
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	if err := writeFileSync(filepath.Join(tmp, "built.json"), append(mj, '\n'), 0o644); err != nil {
		return err
	}
	return renameDir(tmp, dir)
}

// readBuilt reads a module build cache entry, checking each module against
// its manifest; fs.ErrNotExist when there is none.
func readBuilt(dir string) (map[string][]byte, error) {
	b, err := readBoundedFile(filepath.Join(dir, "built.json"), maxManifest)
	if err != nil {
		return nil, err
	}
	var m builtManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("built.json: %w", err)
	}
	if m.Format != modBuildFormat || len(m.Modules) == 0 {
		return nil, fmt.Errorf("built.json: format %q with %d modules", m.Format, len(m.Modules))
	}
	data := make(map[string][]byte)
	for name, e := range m.Modules {
		if name != normModName(filepath.Base(name)) {
			return nil, fmt.Errorf("built.json: bad module name %q", name)
		}
		d, err := os.ReadFile(filepath.Join(dir, name+".ko"))
		if err != nil {
			return nil, err
		}
		if entryOf(d) != e {
			return nil, fmt.Errorf("%s.ko does not match built.json", name)
		}
		data[name] = d
	}
	return data, nil
}
