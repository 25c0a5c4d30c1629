package guest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/themisfs/themis/internal/hosttool"
	"github.com/zeebo/blake3"
	"go.uber.org/zap"
)

// Kernel flavours: Debian's cloud kernel (small, the default) and its
// generic one, which carries more filesystems (f2fs, nilfs2, jfs, minix,
// ...) as modules, ext4 among them.
const (
	FlavorCloud   = "cloud"
	FlavorGeneric = "generic"
	// FlavorCustom is the flavour recorded for an image of a kernel built
	// from a tree (--kernel-tree).
	FlavorCustom = "custom"
)

// kernelFlavor is a flavour's Debian metapackage, whose dependency names
// the current kernel package, and that package's name pattern.
type kernelFlavor struct {
	meta string
	pkg  *regexp.Regexp
}

var kernelFlavors = map[string]kernelFlavor{
	FlavorCloud:   {"linux-image-cloud-amd64", regexp.MustCompile(`^linux-image-[0-9].*-cloud-amd64$`)},
	FlavorGeneric: {"linux-image-amd64", regexp.MustCompile(`^linux-image-[0-9][^-]*-[0-9]+-amd64$`)},
}

// Flavors lists the kernel flavours, for flags and messages.
func Flavors() []string { return []string{FlavorCloud, FlavorGeneric} }

// flavorOf checks a flavour name ("" is FlavorCloud).
func flavorOf(name string) (string, kernelFlavor, error) {
	if name == "" {
		name = FlavorCloud
	}
	f, ok := kernelFlavors[name]
	if !ok {
		return "", kernelFlavor{}, fmt.Errorf("guest: unknown kernel flavor %q (want %s)", name, strings.Join(Flavors(), " or "))
	}
	return name, f, nil
}

// kernelTree is an unpacked kernel: the image and its module directory.
type kernelTree struct {
	Kernel     string // bzImage path
	ModulesDir string // lib/modules/<version>
	Version    string // e.g. "6.1.0-57-cloud-amd64"
	Source     string // .deb path, or "" for a caller-supplied tree
}

// resolveKernel finds the kernel and modules the options ask for,
// downloading and unpacking the Debian package if needed.
func resolveKernel(ctx context.Context, log *zap.Logger, o Options, cacheDir string) (*kernelTree, error) {
	if o.KernelTree != "" {
		return resolveKernelTree(o)
	}
	if o.Kernel != "" || o.ModulesDir != "" {
		if o.Kernel == "" || o.ModulesDir == "" {
			return nil, errors.New("guest: Options.Kernel and Options.ModulesDir go together: set both or neither")
		}
		if o.Deb != "" {
			return nil, errors.New("guest: set Options.Deb or Options.Kernel/ModulesDir, not both")
		}
		k, err := filepath.Abs(o.Kernel)
		if err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		m, err := filepath.Abs(o.ModulesDir)
		if err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		return &kernelTree{Kernel: k, ModulesDir: m, Version: filepath.Base(m)}, nil
	}
	deb := o.Deb
	if deb == "" {
		var err error
		if deb, err = downloadKernel(ctx, log, o.Flavor, o.KernelPackage, cacheDir); err != nil {
			return nil, err
		}
	}
	return unpackKernel(ctx, log, deb, cacheDir)
}

// aptArgs returns extra apt-get arguments. As root, apt-get download would
// drop to the _apt user, which cannot write the cache directory, and warn.
func aptArgs() []string {
	if os.Geteuid() == 0 {
		return []string{"-o", "APT::Sandbox::User=root"}
	}
	return nil
}

// resolveKernelPackage returns the linux-image-<version>[-cloud]-amd64
// that the flavour's metapackage currently depends on.
func resolveKernelPackage(ctx context.Context, flavor string) (string, error) {
	_, kf, err := flavorOf(flavor)
	if err != nil {
		return "", err
	}
	if _, err := hosttool.Look("apt-cache"); err != nil {
		return "", fmt.Errorf("guest: %w, or pass a kernel package with Options.Deb", err)
	}
	out, err := hosttool.Run(ctx, "", "apt-cache", "depends", kf.meta)
	if err != nil {
		return "", fmt.Errorf("guest: resolve kernel package: %w; run apt-get update", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends:")
		if !ok {
			continue
		}
		if dep = strings.Trim(strings.TrimSpace(dep), "<>"); kf.pkg.MatchString(dep) {
			return dep, nil
		}
	}
	return "", fmt.Errorf("guest: resolve kernel package: apt-cache depends %s names no %s:\n%s", kf.meta, kf.pkg, out)
}

// aptURI is one line of `apt-get download --print-uris`.
type aptURI struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // hex; "" when apt gave none
}

func parsePrintURIs(out []byte) (aptURI, error) {
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[0], "'") {
			continue
		}
		u := aptURI{File: f[1]}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return aptURI{}, fmt.Errorf("bad size in %q", line)
		}
		u.Size = size
		if len(f) > 3 {
			if h, ok := strings.CutPrefix(f[3], "SHA256:"); ok {
				u.SHA256 = strings.ToLower(h)
			}
		}
		if u.File != filepath.Base(u.File) || !strings.HasSuffix(u.File, ".deb") {
			return aptURI{}, fmt.Errorf("unexpected file name in %q", line)
		}
		return u, nil
	}
	return aptURI{}, fmt.Errorf("no URI in output %q", out)
}

// downloadKernel fetches the kernel package into <cache>/debs with
// `apt-get download`, unless a copy with the expected hash is already there,
// and returns the .deb path.
func downloadKernel(ctx context.Context, log *zap.Logger, flavor, pkg, cacheDir string) (string, error) {
	debs := filepath.Join(cacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	// Asking apt costs seconds; its answer only changes with the package
	// lists, so remember it per state of the lists.
	memo, err := aptMemoPath(debs, flavor, pkg)
	if err != nil {
		return "", err
	}
	if memo != "" {
		if p, ok := readAptMemo(memo, debs); ok {
			log.Debug("kernel package cached", zap.String("deb", p))
			return p, nil
		}
	}
	if pkg == "" {
		var err error
		if pkg, err = resolveKernelPackage(ctx, flavor); err != nil {
			return "", err
		}
	}
	if _, err := hosttool.Look("apt-get"); err != nil {
		return "", fmt.Errorf("guest: %w, or pass a kernel package with Options.Deb", err)
	}
	// apt-get prints nothing for a file already present in its working
	// directory, so ask from an empty one.
	tmp, err := os.MkdirTemp(debs, ".download-")
	if err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(tmp)
	out, err := hosttool.Run(ctx, tmp, "apt-get", append(aptArgs(), "download", "--print-uris", pkg)...)
	if err != nil {
		return "", fmt.Errorf("guest: apt-get download %s: %w; run apt-get update", pkg, hosttool.Unwrap(err))
	}
	uri, err := parsePrintURIs(out)
	if err != nil {
		return "", fmt.Errorf("guest: apt-get download --print-uris %s: %w", pkg, err)
	}
	dst := filepath.Join(debs, uri.File)
	if st, err := os.Stat(dst); err == nil && st.Size() == uri.Size {
		sum, err := sha256File(dst)
		if err != nil {
			return "", err
		}
		if uri.SHA256 == "" || sum == uri.SHA256 {
			log.Debug("kernel package cached", zap.String("deb", dst))
			return dst, writeAptMemo(memo, uri)
		}
		log.Warn("cached kernel package has the wrong hash; downloading again", zap.String("deb", dst))
	}
	log.Info("downloading kernel package", zap.String("package", pkg), zap.Int64("bytes", uri.Size))
	if _, err := hosttool.Run(ctx, tmp, "apt-get", append(aptArgs(), "download", pkg)...); err != nil {
		return "", fmt.Errorf("guest: apt-get download %s: %w; run apt-get update", pkg, hosttool.Unwrap(err))
	}
	got := filepath.Join(tmp, uri.File)
	if uri.SHA256 != "" {
		sum, err := sha256File(got)
		if err != nil {
			return "", err
		}
		if sum != uri.SHA256 {
			return "", fmt.Errorf("guest: apt-get download %s: sha256 %s, apt expected %s", pkg, sum, uri.SHA256)
		}
	}
	if err := os.Rename(got, dst); err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	return dst, writeAptMemo(memo, uri)
}

// aptListsDir holds apt's package lists; their names, sizes and mtimes
// identify what apt-cache and apt-get download would answer.
const aptListsDir = "/var/lib/apt/lists"

// aptMemoPath returns the file that remembers which .deb apt resolves pkg
// to, for the current state of the package lists; "" when the lists cannot
// be read (then apt is asked every time).
func aptMemoPath(debs, flavor, pkg string) (string, error) {
	_, kf, err := flavorOf(flavor)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(aptListsDir)
	if err != nil {
		return "", nil // no lists: nothing to key on; apt itself will explain
	}
	h := blake3.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", imageFormat, kf.meta, pkg)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return "", fmt.Errorf("guest: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", e.Name(), info.Size(), info.ModTime().UnixNano())
	}
	return filepath.Join(debs, "resolved-"+hex.EncodeToString(h.Sum(nil))[:32]+".json"), nil
}

// readAptMemo returns the remembered .deb if it is still in debs. A missing,
// unreadable or stale memo is not an error: it only means asking apt again.
func readAptMemo(memo, debs string) (string, bool) {
	b, err := os.ReadFile(memo)
	if err != nil {
		return "", false
	}
	var u aptURI
	if err := json.Unmarshal(b, &u); err != nil || u.File != filepath.Base(u.File) || u.File == "" {
		return "", false
	}
	p := filepath.Join(debs, u.File)
	if st, err := os.Stat(p); err != nil || st.Size() != u.Size {
		return "", false
	}
	return p, true
}

// writeAptMemo records apt's answer; memo "" records nothing.
func writeAptMemo(memo string, u aptURI) error {
	if memo == "" {
		return nil
	}
	b, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	tmp := memo + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	if err := os.Rename(tmp, memo); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	return nil
}

func sha256File(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("guest: hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// unpackKernel extracts a linux-image .deb into <cache>/kernels/<sha256>/
// (once; later calls reuse it) and locates the kernel and module tree.
func unpackKernel(ctx context.Context, log *zap.Logger, deb, cacheDir string) (*kernelTree, error) {
	deb, err := filepath.Abs(deb)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	sum, err := sha256File(deb)
	if err != nil {
		return nil, err
	}
	kernels := filepath.Join(cacheDir, "kernels")
	dir := filepath.Join(kernels, sum)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(kernels, 0o755); err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		tmp, err := os.MkdirTemp(kernels, ".unpack-")
		if err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		defer os.RemoveAll(tmp) // no-op after a successful rename
		log.Debug("unpacking kernel package", zap.String("deb", deb), zap.String("dir", dir))
		if _, err := hosttool.Run(ctx, "", "dpkg-deb", "-x", deb, tmp); err != nil {
			return nil, fmt.Errorf("guest: unpack %s: %w", deb, err)
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		if err := renameDir(tmp, dir); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	kt, err := findKernel(dir)
	if err != nil {
		return nil, fmt.Errorf("%w (package %s)", err, deb)
	}
	kt.Source = deb
	return kt, nil
}

// findKernel locates boot/vmlinuz-<v> and lib/modules/<v> in an unpacked
// package (or usr/lib/modules with a merged /usr).
func findKernel(root string) (*kernelTree, error) {
	images, err := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	if len(images) == 0 {
		return nil, errors.New("guest: no boot/vmlinuz-* in the kernel package; is it a linux-image package?")
	}
	if len(images) > 1 {
		return nil, fmt.Errorf("guest: several kernel images in the package: %s", strings.Join(images, ", "))
	}
	version := strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")
	for _, d := range []string{"lib/modules", "usr/lib/modules"} {
		m := filepath.Join(root, d, version)
		if st, err := os.Stat(m); err == nil && st.IsDir() {
			return &kernelTree{Kernel: images[0], ModulesDir: m, Version: version}, nil
		}
	}
	return nil, fmt.Errorf("guest: no lib/modules/%s in the kernel package", version)
}

// renameDir moves a finished temporary directory into place. If another
// builder got there first, its entry wins and tmp is removed.
func renameDir(tmp, dst string) error {
	err := os.Rename(tmp, dst)
	if err == nil {
		return nil
	}
	if _, serr := os.Stat(dst); serr == nil {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			return fmt.Errorf("guest: %w", rerr)
		}
		return nil
	}
	return fmt.Errorf("guest: %w", err)
}

// UnpackedKernel finds a kernel package of version already unpacked in
// cacheDir (<cache>/kernels/<sha256 of the .deb>/, as Build leaves it):
// its kernel image and module dir, for a build of the same kernel with
// another agent (Options.Kernel, Options.ModulesDir).
func UnpackedKernel(cacheDir, version string) (kernel, modules string, err error) {
	images, err := filepath.Glob(filepath.Join(cacheDir, "kernels", "*", "boot", "vmlinuz-"+version))
	if err != nil {
		return "", "", fmt.Errorf("guest: %w", err)
	}
	for _, k := range images {
		if kt, err := findKernel(filepath.Dir(filepath.Dir(k))); err == nil && kt.Version == version {
			return kt.Kernel, kt.ModulesDir, nil
		}
	}
	return "", "", fmt.Errorf("guest: no kernels/*/boot/vmlinuz-%s with its modules in %s", version, cacheDir)
}
