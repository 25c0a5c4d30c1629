package faultsuite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/vmm/qemu"
)

// dirs are the suite's private dirs, made by TestMain (see the package
// doc), in two owned dirs (internal/scratch) named "faultsuite-*", never
// "themis-*": no daemon's sweep takes them for its own leftovers.
var dirs struct {
	// Scratch is $THEMIS_SCRATCH_DIR of this process and its themisd
	// children (in /dev/shm where there is one).
	Scratch string
	// Temp is their $TMPDIR.
	Temp string
	// Work holds what the suite makes itself (binaries, state dirs,
	// sockets, configs, logs): neither counted nor swept.
	Work string
}

// ownedPrefix names the suite's owned dirs.
const ownedPrefix = "faultsuite-"

// leftoverGrace is how old the owned dirs of a suite that is gone (killed
// at a timeout, say) must be before a later run removes them: longer than
// the instant between making one and locking it.
const leftoverGrace = time.Minute

func TestMain(m *testing.M) {
	code, err := runMain(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultsuite:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// runMain sweeps what runs that are gone left, makes the private dirs,
// points the environment at them, runs the tests and removes the dirs.
func runMain(m *testing.M) (code int, err error) {
	shm := os.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm = "/dev/shm"
	}
	for _, parent := range []string{shm, os.TempDir()} {
		if _, err := scratch.Sweep(parent, ownedPrefix, leftoverGrace, nil, ownedPrefix); err != nil {
			return 1, err
		}
	}
	root, err := scratch.MkdirTemp(os.TempDir(), ownedPrefix)
	if err != nil {
		return 1, err
	}
	defer func() { err = errors.Join(err, root.Remove()) }()
	shmRoot, err := scratch.MkdirTemp(shm, ownedPrefix)
	if err != nil {
		return 1, err
	}
	defer func() { err = errors.Join(err, shmRoot.Remove()) }()
	dirs.Scratch = filepath.Join(shmRoot.Path, "scratch")
	dirs.Temp, dirs.Work = filepath.Join(root.Path, "tmp"), filepath.Join(root.Path, "work")
	for _, d := range []string{dirs.Scratch, dirs.Temp, dirs.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return 1, err
		}
	}
	for k, v := range map[string]string{qemu.ScratchEnv: dirs.Scratch, "TMPDIR": dirs.Temp} {
		if err := os.Setenv(k, v); err != nil {
			return 1, err
		}
	}
	return m.Run(), nil
}
