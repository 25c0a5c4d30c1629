package nested

import (
	"path/filepath"

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

// FaultEnv names a test-only fault for the vmm/kvm test binary: "restore"
// makes every restore of a Linux machine fail the verify gate (the nested
// job's -inject-fault restore; docs/kvm.md). Nothing else reads it.
const FaultEnv = "THEMIS_TEST_FAULT"

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
