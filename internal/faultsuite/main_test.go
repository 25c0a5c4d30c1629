package faultsuite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/themisfs/themis/vmm/qemu"
)

// dirs are the suite's private dirs, made by TestMain (see the package
// doc). Names start with "faultsuite-", never "themis-": no daemon's sweep
// takes them for its own leftovers.
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

// runMain makes the private dirs, points the environment at them, runs
// the tests and removes the dirs.
func runMain(m *testing.M) (code int, err error) {
	root, err := os.MkdirTemp("", "faultsuite-")
	if err != nil {
		return 1, err
	}
	shm := root
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm = "/dev/shm"
	}
	scratch, err := os.MkdirTemp(shm, "faultsuite-")
	if err != nil {
		return 1, errors.Join(err, os.RemoveAll(root))
	}
	defer func() { err = errors.Join(err, os.RemoveAll(scratch), os.RemoveAll(root)) }()
	dirs.Scratch, dirs.Temp, dirs.Work = scratch, filepath.Join(root, "tmp"), filepath.Join(root, "work")
	for _, d := range []string{dirs.Temp, dirs.Work} {
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
