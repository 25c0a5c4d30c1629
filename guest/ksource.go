package guest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/themisfs/themis/internal/hosttool"
	"github.com/zeebo/blake3"
	"go.uber.org/zap"
)

// sourceRoot is where Debian's linux-source-<x.y> and
// linux-headers-<version> packages put the kernel source tarball and the
// headers trees.
const sourceRoot = "/usr/src"

// toolchain is what an out-of-tree module build needs: the headers (or
// built) tree make runs in, the kernel release its modules must carry in
// their vermagic, and, for patches, the extracted kernel source.
type toolchain struct {
	Headers  string // the tree `make -C` runs in
	Release  string // UTS_RELEASE, e.g. "6.1.0-57-cloud-amd64"
	Source   string // extracted source root (holds fs/ and Makefile); "" without patches
	SourceID string // sha256 of the source tarball; "" without patches
}

// headersDir returns the headers tree for kernel release rel: o.HeadersDir,
// the kernel tree itself for a developer's tree, else
// /usr/src/linux-headers-<rel>, with the Debian package to install when it
// is missing.
func headersDir(o Options, rel string) (string, error) {
	dir, pkg := o.HeadersDir, ""
	switch {
	case dir != "":
	case o.KernelTree != "":
		dir = o.KernelTree
	default:
		dir, pkg = filepath.Join(sourceRoot, "linux-headers-"+rel), "linux-headers-"+rel
	}
	if st, err := os.Stat(filepath.Join(dir, "Makefile")); err != nil || !st.Mode().IsRegular() {
		if pkg != "" {
			return "", fmt.Errorf("guest: no kernel headers for %s at %s: install the Debian package %s (apt-get install %s)", rel, dir, pkg, pkg)
		}
		return "", fmt.Errorf("guest: %s has no Makefile: not a kernel headers or build tree", dir)
	}
	return dir, nil
}

// utsRelease reads the release a headers or build tree builds modules for
// (include/generated/utsrelease.h).
func utsRelease(tree string) (string, error) {
	b, err := readBoundedFile(filepath.Join(tree, "include", "generated", "utsrelease.h"), 4096)
	if err != nil {
		return "", fmt.Errorf("guest: kernel release of %s: %w (is the tree configured and built?)", tree, err)
	}
	m := regexp.MustCompile(`#define UTS_RELEASE "([^"]+)"`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("guest: no UTS_RELEASE in %s/include/generated/utsrelease.h", tree)
	}
	return string(m[1]), nil
}

// debVersion returns the Version field of a .deb ("6.1.192-3").
func debVersion(ctx context.Context, deb string) (string, error) {
	out, err := hosttool.Run(ctx, "", "dpkg-deb", "-f", deb, "Version")
	if err != nil {
		return "", fmt.Errorf("guest: version of %s: %w", filepath.Base(deb), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// upstreamOf strips the Debian revision: "6.1.192-3" -> "6.1.192".
func upstreamOf(debVer string) string {
	if i := strings.LastIndexByte(debVer, '-'); i > 0 {
		return debVer[:i]
	}
	return debVer
}

// seriesOf returns "x.y" of a kernel version ("6.1.192" -> "6.1").
func seriesOf(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// sourceTarball returns the linux-source tarball for the kernel package
// version debVer, naming the package to install when it is missing.
func sourceTarball(o Options, debVer string) (string, error) {
	if o.KernelSource != "" {
		return o.KernelSource, nil
	}
	pkg := "linux-source-" + seriesOf(upstreamOf(debVer))
	p := filepath.Join(sourceRoot, pkg+".tar.xz")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("guest: no kernel source at %s: install the Debian package %s (apt-get install %s=%s, the kernel's version)", p, pkg, pkg, debVer)
	}
	return p, nil
}

// checkVersions compares the extracted source's version (its Makefile) and
// the headers package's with the kernel package's: a module built from
// other sources or against other headers does not match the kernel.
func checkVersions(srcVer, headersPkg, headersVer, debVer string) error {
	if srcVer != "" && srcVer != upstreamOf(debVer) {
		pkg := "linux-source-" + seriesOf(upstreamOf(debVer))
		return fmt.Errorf("guest: the kernel source is %s but the kernel package is %s: install the matching source (apt-get install %s=%s)", srcVer, debVer, pkg, debVer)
	}
	if headersVer != "" && headersVer != debVer {
		return fmt.Errorf("guest: %s is %s but the kernel package is %s: install the matching headers (apt-get install %s=%s)", headersPkg, headersVer, debVer, headersPkg, debVer)
	}
	return nil
}

// installedVersion returns a Debian package's installed version, or ""
// when dpkg-query does not know it (a headers tree not from a package).
func installedVersion(ctx context.Context, pkg string) string {
	out, err := hosttool.Run(ctx, "", "dpkg-query", "-W", "-f=${Version}", pkg)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// makefileVersion reads VERSION.PATCHLEVEL.SUBLEVEL from a kernel source's
// top Makefile.
func makefileVersion(makefile string) (string, error) {
	b, err := readBoundedFile(makefile, 1<<20)
	if err != nil {
		return "", fmt.Errorf("guest: kernel source version: %w", err)
	}
	var v [3]string
	for _, line := range strings.SplitN(string(b), "\n", 40) {
		k, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		for i, name := range []string{"VERSION", "PATCHLEVEL", "SUBLEVEL"} {
			if strings.TrimSpace(k) == name {
				v[i] = strings.TrimSpace(val)
			}
		}
	}
	if v[0] == "" || v[1] == "" || v[2] == "" {
		return "", fmt.Errorf("guest: no VERSION/PATCHLEVEL/SUBLEVEL in %s", makefile)
	}
	return v[0] + "." + v[1] + "." + v[2], nil
}

// extractSource unpacks fs/ and the top Makefile of a linux-source tarball
// into <cache>/ksrc/<sha256 of the tarball>/ once; later builds reuse it.
func extractSource(ctx context.Context, log *zap.Logger, tarball, cacheDir string) (dir, sum string, err error) {
	if sum, err = tarballSum(tarball, cacheDir); err != nil {
		return "", "", err
	}
	root := filepath.Join(cacheDir, "ksrc")
	dir = filepath.Join(root, sum)
	if _, err := os.Stat(filepath.Join(dir, "Makefile")); err == nil {
		return dir, sum, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", fmt.Errorf("guest: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".extract-")
	if err != nil {
		return "", "", fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename
	top := strings.TrimSuffix(filepath.Base(tarball), ".tar.xz")
	log.Info("extracting the kernel source's fs/ (once per source package)", zap.String("tarball", tarball))
	if _, err := hosttool.Run(ctx, "", "tar", "-xJf", tarball, "-C", tmp, "--strip-components=1",
		"--no-same-owner", top+"/fs", top+"/Makefile"); err != nil {
		return "", "", fmt.Errorf("guest: extract %s: %w", tarball, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", "", fmt.Errorf("guest: %w", err)
	}
	if err := renameDir(tmp, dir); err != nil {
		return "", "", err
	}
	return dir, sum, nil
}

// tarballSum returns the sha256 of the source tarball, remembered per
// path, size and mtime in <cache>/ksrc/sums/ (hashing 138 MB costs most
// of a second on every build otherwise).
func tarballSum(tarball, cacheDir string) (string, error) {
	st, err := os.Stat(tarball)
	if err != nil {
		return "", fmt.Errorf("guest: kernel source: %w", err)
	}
	h := blake3.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d", tarball, st.Size(), st.ModTime().UnixNano())
	memo := filepath.Join(cacheDir, "ksrc", "sums", fmt.Sprintf("%x", h.Sum(nil)[:16]))
	if b, err := readBoundedFile(memo, 128); err == nil && len(strings.TrimSpace(string(b))) == 64 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("guest: %w", err)
	}
	sum, err := sha256File(tarball)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(memo), 0o755); err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	return sum, writeFileAtomic(memo, []byte(sum+"\n"))
}

// writeFileAtomic writes p through a synced temporary file in the same
// directory and a rename, so readers see the old or the new content.
func writeFileAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-")
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	tmp := f.Name()
	if err := f.Close(); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	if err := writeFileSync(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("guest: %w", err)
	}
	return nil
}
