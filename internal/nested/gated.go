package nested

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/themisfs/themis/guest"
)

// JobTools are the host programs a job of this project's gets, with their
// libraries: base images (mkfs), the tests' on-disk checks (debugfs, e2fsck).
var JobTools = []string{"mkfs.ext2", "mkfs.ext3", "mkfs.ext4", "mke2fs", "e2fsck", "debugfs", "dumpe2fs", "taskset"}

// JobFiles are host files a job gets at the same paths (mke2fs reads its
// defaults from mke2fs.conf: without it base images would differ).
var JobFiles = []string{"/etc/mke2fs.conf"}

// EmulatedEnv is set to "1" in every step's environment: tests that know
// of the emulated host's own limits read it (docs/kvm.md).
const EmulatedEnv = "THEMIS_EMULATED_AMDV"

// Job paths.
const (
	BinDir    = "/bin-themis"
	CacheDir  = "/cache"
	jobPATH   = "PATH=" + BinDir + ":/usr/sbin:/usr/bin:/sbin:/bin"
	goTestPkg = "./vmm/kvm"
)

// StageProject stages what a job of this project needs: the tools and
// files above, the guest image (prebuilt, found through guest.PrebuiltEnv)
// and the given programs in BinDir. It returns the environment every
// step should start from.
func StageProject(st *Stage, img *guest.Image, bins map[string]string) ([]string, error) {
	for _, t := range JobTools {
		if err := st.Tool(t); err != nil {
			return nil, err
		}
	}
	for _, f := range JobFiles {
		if err := st.File(f, f, 0o644); err != nil {
			return nil, err
		}
	}
	imgDir := filepath.Join(CacheDir, "images", img.Key)
	for _, f := range []string{guest.KernelFile, guest.InitramfsFile, guest.ManifestFile} {
		if err := st.File(filepath.Join(imgDir, f), filepath.Join(filepath.Dir(img.Kernel), f), 0o644); err != nil {
			return nil, err
		}
	}
	for name, src := range bins {
		if err := st.File(filepath.Join(BinDir, name), src, 0o755); err != nil {
			return nil, err
		}
	}
	return []string{
		jobPATH, "HOME=/root", "TMPDIR=/tmp", "CI=true",
		"THEMIS_CACHE_DIR=" + CacheDir, guest.PrebuiltEnv + "=" + imgDir,
		"THEMIS_SOCKET=/tmp/themisd.sock", EmulatedEnv + "=1",
	}, nil
}

// BuildStatic builds a package of this source tree as a static binary
// (CGO_ENABLED=0: the job has no libc of its own for it); test says to
// build the package's test binary (go test -c) instead.
func BuildStatic(ctx context.Context, pkg, out string, test bool) error {
	src, err := guest.SourceDir()
	if err != nil {
		return err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-trimpath", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-trimpath", "-o", out, pkg}
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nested: go %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
