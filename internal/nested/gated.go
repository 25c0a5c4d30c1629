package nested

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/themisfs/themis/guest"
)

// JobTools are the host programs a job of this project's gets, with their
// libraries: base images (mkfs; mkfs.minix for the generic flavour's
// lane), the tests' on-disk checks (debugfs, e2fsck).
var JobTools = []string{"mkfs.ext2", "mkfs.ext3", "mkfs.ext4", "mke2fs", "e2fsck", "debugfs", "dumpe2fs", "mkfs.minix", "taskset"}

// JobLibs are host libraries a job gets at the same paths, with theirs:
// libfaketime, which freezes mkfs.minix's clock for a byte-identical base
// image (guest/baseimage).
var JobLibs = []string{"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"}

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

// StageProject stages what a job of this project needs: the tools, files
// and libraries above, the guest images (prebuilt, one per kernel flavour:
// all of them listed in guest.PrebuiltEnv, which gives each request the
// image of its flavour) and the given programs in BinDir. It returns the
// environment every step should start from.
func StageProject(st *Stage, imgs []*guest.Image, bins map[string]string) ([]string, error) {
	if len(imgs) == 0 {
		return nil, errors.New("nested: stage: no guest image")
	}
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
	for _, l := range JobLibs {
		if err := st.Library(l); err != nil {
			return nil, err
		}
	}
	var dirs []string
	for _, img := range imgs {
		imgDir := filepath.Join(CacheDir, "images", img.Key)
		for _, f := range []string{guest.KernelFile, guest.InitramfsFile, guest.ManifestFile} {
			if err := st.File(filepath.Join(imgDir, f), filepath.Join(filepath.Dir(img.Kernel), f), 0o644); err != nil {
				return nil, err
			}
		}
		dirs = append(dirs, imgDir)
	}
	for name, src := range bins {
		if err := st.File(filepath.Join(BinDir, name), src, 0o755); err != nil {
			return nil, err
		}
	}
	return []string{
		jobPATH, "HOME=/root", "TMPDIR=/tmp", "CI=true",
		"THEMIS_CACHE_DIR=" + CacheDir, guest.PrebuiltEnv + "=" + strings.Join(dirs, string(filepath.ListSeparator)),
		"THEMIS_SOCKET=/tmp/themisd.sock", EmulatedEnv + "=1",
	}, nil
}
