package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

const loopControl = "/dev/loop-control"

// defaultWorkDir is /dev/shm where it is a tmpfs (RAM, as Metis's
// ramdisks), else os.TempDir().
func defaultWorkDir() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		return "/dev/shm"
	}
	return os.TempDir()
}

// checkHost says, wrapping ErrUnavailable, why this host cannot loop-mount.
func checkHost() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: loop-mounting needs root (euid %d)", ErrUnavailable, os.Geteuid())
	}
	if _, err := os.Stat(loopControl); err != nil {
		return fmt.Errorf("%w: no loop devices: %v (load the loop module, or give the container /dev/loop-control)", ErrUnavailable, err)
	}
	return nil
}

// mountError classifies a mount failure: permission, a missing driver or a
// missing device mean the host cannot run the baseline at all.
func mountError(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %s: %v (not permitted here: a container without CAP_SYS_ADMIN?)", ErrUnavailable, what, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%w: %s: %v (the host kernel has no driver for this filesystem)", ErrUnavailable, what, err)
	case errors.Is(err, unix.ENXIO), errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s: %v (no usable loop device)", ErrUnavailable, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func newMounter(mode string) (mounter, error) {
	if mode == MountExec {
		for _, tool := range []string{"mount", "umount"} {
			if _, err := exec.LookPath(tool); err != nil {
				return nil, fmt.Errorf("%w: %s not installed (Debian mount)", ErrUnavailable, tool)
			}
		}
		return execMounter{}, nil
	}
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, mountError("open "+loopControl, err)
	}
	return &syscallMounter{ctl: ctl}, nil
}

// syscallMounter attaches a free loop device to the work file with
// LOOP_CONFIGURE (autoclear: the kernel detaches it when the last user, the
// mount, goes) and mounts it with mount(2).
type syscallMounter struct {
	ctl *os.File
}

func (m *syscallMounter) mount(work *os.File, dir, fstype string) error {
	wfd, err := work.SyscallConn()
	if err != nil {
		return err
	}
	for range 16 {
		n, err := unix.IoctlRetInt(int(m.ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return mountError("ioctl LOOP_CTL_GET_FREE", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := openLoop(dev, n)
		if err != nil {
			return mountError("open "+dev, err)
		}
		var cerr error
		if err := wfd.Control(func(fd uintptr) {
			cfg := unix.LoopConfig{Fd: uint32(fd), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
			cerr = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		}); err != nil {
			lf.Close()
			return err
		}
		if errors.Is(cerr, unix.EBUSY) {
			lf.Close() // taken between GET_FREE and CONFIGURE: try another
			continue
		}
		if cerr != nil {
			lf.Close()
			return mountError("ioctl LOOP_CONFIGURE "+dev, cerr)
		}
		merr := unix.Mount(dev, dir, fstype, 0, "")
		// The mount holds the device now; closing ours leaves it as the last
		// user, so umount detaches the loop device (on a failed mount, this
		// close does).
		if err := lf.Close(); err != nil && merr == nil {
			merr = err
		}
		if merr != nil {
			return mountError(fmt.Sprintf("mount -t %s %s", fstype, dev), merr)
		}
		return nil
	}
	return errors.New("attach loop device: every free device was taken before it could be configured")
}

// openLoop opens /dev/loopN, making the node when the host has no udev to
// make it (a container's /dev).
func openLoop(dev string, n int) (*os.File, error) {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, &os.PathError{Op: "mknod", Path: dev, Err: err}
		}
		f, err = os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	return f, err
}

func (m *syscallMounter) umount(dir string) error {
	if err := unix.Unmount(dir, 0); err != nil {
		return &os.PathError{Op: "umount", Path: dir, Err: err}
	}
	return nil
}

func (m *syscallMounter) close() error { return m.ctl.Close() }

// execMounter runs mount(8) -o loop and umount(8).
type execMounter struct{}

func (execMounter) mount(work *os.File, dir, fstype string) error {
	out, err := exec.CommandContext(context.Background(), "mount", "-o", "loop", "-t", fstype, work.Name(), dir).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "permission denied") || strings.Contains(msg, "must be superuser") {
			return fmt.Errorf("%w: mount -o loop: %v: %s", ErrUnavailable, err, msg)
		}
		return fmt.Errorf("mount -o loop: %w: %s", err, msg)
	}
	return nil
}

func (execMounter) umount(dir string) error {
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("umount: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (execMounter) close() error { return nil }
