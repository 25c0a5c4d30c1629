package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
)

// ErrUnavailable is wrapped by Baseline's error when the host cannot run the
// baseline: not root, no loop devices, or a filesystem its kernel cannot
// mount. The message says which.
var ErrUnavailable = errors.New("bench: in-OS baseline unavailable on this host")

// Baseline defaults and limits.
const (
	// DefaultBaselineLane is the lane spec of the baseline image: the same
	// default ext2 image an explore run's lane gets.
	DefaultBaselineLane = "ext2"
	// DefaultBaselineStates is the number of states Baseline measures.
	DefaultBaselineStates = 100
	// MaxBaselineStates bounds BaselineOptions.States.
	MaxBaselineStates = 1_000_000
	// chainLen is how many states deep a chain of states grows before the
	// next state restores the root image again (as a bounded DFS returns to
	// the root); it keeps the ops' names from running out of inodes.
	chainLen = 64
)

// Mount modes of BaselineOptions.Mount.
const (
	// MountSyscall attaches a loop device with LOOP_CONFIGURE (autoclear)
	// and calls mount(2)/umount(2) directly, as Metis does on its ramdisk.
	MountSyscall = "syscall"
	// MountExec runs mount(8) -o loop and umount(8): what a shell script
	// would pay, process start included.
	MountExec = "exec"
)

// BaselineOptions are the inputs of Baseline.
type BaselineOptions struct {
	// Lane is the lane spec of the image (guest.ParseLaneSpec), e.g.
	// "ext2" (the default, 8 MiB) or "ext2:size=4" (the 4 MiB image of the
	// 8.8 ms/state anchor). The image is baseimage.Make's: the very bytes an
	// explore lane starts from.
	Lane string
	// CacheDir is baseimage.Make's cache directory ("" default).
	CacheDir string
	// States is the number of states measured (default 100, at most
	// MaxBaselineStates).
	States int
	// WorkDir holds the work image and the mount point. "" means /dev/shm
	// where it is a tmpfs, else os.TempDir(). Metis keeps its images in RAM
	// (brd ramdisks); on a disk-backed directory every unmount's flush
	// becomes an fsync of the work file that reaches the disk (about 10 ms
	// per state more, measured).
	WorkDir string
	// Mount is MountSyscall (default) or MountExec.
	Mount string
}

// BaselineResult is what Baseline measured. Times are cumulative over States.
type BaselineResult struct {
	// Lane is the canonical lane spec (guest.LaneSpec.String()) and FS its
	// filesystem type.
	Lane, FS string
	// ImageBytes is the image size: the bytes copied in and out per state.
	ImageBytes int64
	// States counts states measured; Mount is the mount mode used and
	// WorkDir the directory that held the work image.
	States  int
	Mount   string
	WorkDir string
	// Elapsed is the wall time of the measured loop.
	Elapsed time.Duration
	// RestoreTime copies the state's image into the work file; MountTime
	// attaches the loop device and mounts; OpTime applies the op; UmountTime
	// unmounts (flushing the filesystem, detaching the loop device);
	// StoreTime copies the whole image back out as the new state.
	RestoreTime, MountTime, OpTime, UmountTime, StoreTime time.Duration
	// StateTimes is the wall time of each state (restore through store),
	// in order, for medians and percentiles.
	StateTimes []time.Duration
}

// BaselineSplit is a per-state split in milliseconds.
type BaselineSplit struct {
	Restore, Mount, Op, Umount, Store float64
	// Total is the wall time per state (Elapsed / States).
	Total float64
	// Backtrack is everything but the op: restore + mount + umount + store.
	Backtrack float64
}

// MsPerState is the wall time per state in milliseconds.
func (r *BaselineResult) MsPerState() float64 { return perState(r.Elapsed, r.States) }

// Split returns the per-state split in milliseconds.
func (r *BaselineResult) Split() BaselineSplit {
	s := BaselineSplit{
		Restore: perState(r.RestoreTime, r.States),
		Mount:   perState(r.MountTime, r.States),
		Op:      perState(r.OpTime, r.States),
		Umount:  perState(r.UmountTime, r.States),
		Store:   perState(r.StoreTime, r.States),
		Total:   r.MsPerState(),
	}
	s.Backtrack = s.Restore + s.Mount + s.Umount + s.Store
	return s
}

// perState is d / n in milliseconds (0 for n == 0).
func perState(d time.Duration, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d) / float64(n) / float64(time.Millisecond)
}

// mounter attaches and mounts an image file, and unmounts it.
type mounter interface {
	mount(work *os.File, dir, fstype string) error
	umount(dir string) error
	close() error
}

// Baseline measures the Metis-style in-OS backtracking cost on the host. Per
// state it restores the state's image into a work file, loop-mounts it,
// applies one op (mkdir, create, write 4 KiB, chmod, in rotation, each with
// plain syscalls), unmounts, and copies the image back out as the new state.
// States form chains of up to 64 ops from the root image.
func Baseline(ctx context.Context, o BaselineOptions) (_ *BaselineResult, err error) {
	spec, err := o.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkHost(); err != nil {
		return nil, err
	}
	base, err := baseimage.Make(ctx, o.CacheDir, spec)
	if err != nil {
		return nil, fmt.Errorf("bench: baseline: %w", err)
	}
	root, err := os.ReadFile(base)
	if err != nil {
		return nil, fmt.Errorf("bench: baseline: %w", err)
	}
	ws, err := openWorkspace(o.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("bench: baseline: %w", err)
	}
	defer func() { err = errors.Join(err, ws.close()) }()
	mo, err := newMounter(o.Mount)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, mo.close()) }()
	res := &BaselineResult{Lane: spec.String(), FS: spec.FS, ImageBytes: int64(len(root)), Mount: o.Mount, WorkDir: o.WorkDir,
		StateTimes: make([]time.Duration, 0, o.States)}
	if err := res.run(ctx, ws, mo, spec.FS, root, o.States); err != nil {
		return nil, err
	}
	return res, nil
}

// normalize fills in the defaults, checks the options and parses the lane.
func (o *BaselineOptions) normalize() (guest.LaneSpec, error) {
	if o.Lane == "" {
		o.Lane = DefaultBaselineLane
	}
	switch {
	case o.States == 0:
		o.States = DefaultBaselineStates
	case o.States < 0 || o.States > MaxBaselineStates:
		return guest.LaneSpec{}, fmt.Errorf("bench: baseline states %d: want 1..%d", o.States, MaxBaselineStates)
	}
	switch o.Mount {
	case "":
		o.Mount = MountSyscall
	case MountSyscall, MountExec:
	default:
		return guest.LaneSpec{}, fmt.Errorf("bench: baseline mount mode %q: want %q or %q", o.Mount, MountSyscall, MountExec)
	}
	if o.WorkDir == "" {
		o.WorkDir = defaultWorkDir()
	}
	spec, err := guest.ParseLaneSpec(o.Lane)
	if err != nil {
		return guest.LaneSpec{}, fmt.Errorf("bench: baseline: %w", err)
	}
	return spec, nil
}

// workspace is a private directory under the work directory holding the
// work image and the mount point.
type workspace struct {
	dir, mnt string
	img      *os.File
}

// openWorkspace makes a workspace under workDir.
func openWorkspace(workDir string) (_ *workspace, err error) {
	dir, err := os.MkdirTemp(workDir, "themis-bench-")
	if err != nil {
		return nil, err
	}
	ws := &workspace{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, ws.close())
		}
	}()
	img, err := os.OpenFile(filepath.Join(dir, "work.img"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	ws.img = img
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return nil, err
	}
	ws.mnt = mnt
	return ws, nil
}

// close removes the workspace entry by entry, never recursively: a failed
// umount must not let the cleanup reach into a mounted filesystem.
func (ws *workspace) close() error {
	var errs []error
	if ws.mnt != "" {
		errs = append(errs, os.Remove(ws.mnt))
	}
	if ws.img != nil {
		errs = append(errs, ws.img.Close(), os.Remove(ws.img.Name()))
	}
	errs = append(errs, os.Remove(ws.dir))
	return errors.Join(errs...)
}

// run measures states states: chains of chainLen ops from root.
func (res *BaselineResult) run(ctx context.Context, ws *workspace, mo mounter, fstype string, root []byte, states int) error {
	cur, next := make([]byte, len(root)), make([]byte, len(root))
	start := time.Now()
	for i := range states {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: baseline: stopped after %d states: %w", i, err)
		}
		src := cur
		if i%chainLen == 0 {
			src = root
		}
		if err := res.state(ws, mo, fstype, i, src, next); err != nil {
			return err
		}
		cur, next = next, cur
	}
	res.Elapsed = time.Since(start)
	if bytes.Equal(cur, root) {
		return errors.New("bench: baseline: the last state's image equals the root image: the ops did not reach the image")
	}
	return nil
}

// state measures state i: restore src into the work image, mount, apply
// op i, unmount, and store the image into dst.
func (res *BaselineResult) state(ws *workspace, mo mounter, fstype string, i int, src, dst []byte) error {
	t0 := time.Now()
	if _, err := ws.img.WriteAt(src, 0); err != nil {
		return fmt.Errorf("bench: baseline: restore: %w", err)
	}
	t1 := time.Now()
	if err := mo.mount(ws.img, ws.mnt, fstype); err != nil {
		return fmt.Errorf("bench: baseline: state %d: %w", i, err)
	}
	t2 := time.Now()
	opErr := applyOp(ws.mnt, i%chainLen)
	t3 := time.Now()
	if err := mo.umount(ws.mnt); err != nil {
		return fmt.Errorf("bench: baseline: state %d: %w", i, err)
	}
	if opErr != nil {
		return fmt.Errorf("bench: baseline: state %d: %w", i, opErr)
	}
	t4 := time.Now()
	if _, err := ws.img.ReadAt(dst, 0); err != nil {
		return fmt.Errorf("bench: baseline: store: %w", err)
	}
	t5 := time.Now()
	res.RestoreTime += t1.Sub(t0)
	res.MountTime += t2.Sub(t1)
	res.OpTime += t3.Sub(t2)
	res.UmountTime += t4.Sub(t3)
	res.StoreTime += t5.Sub(t4)
	res.StateTimes = append(res.StateTimes, t5.Sub(t0))
	res.States++
	return nil
}

// applyOp applies the i-th op of a chain under dir: mkdir d-K, create f-K,
// write 4 KiB of 0x55 to f-K, chmod f-K 600, for K = i/4 (the op kinds of
// explore's set, each with plain syscalls).
func applyOp(dir string, i int) error {
	k := i / 4
	f := filepath.Join(dir, fmt.Sprintf("f-%02d", k))
	switch i % 4 {
	case 0:
		return os.Mkdir(filepath.Join(dir, fmt.Sprintf("d-%02d", k)), 0o755)
	case 1:
		h, err := os.OpenFile(f, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		return h.Close()
	case 2:
		h, err := os.OpenFile(f, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := h.WriteAt(bytes.Repeat([]byte{0x55}, 4096), 0); err != nil {
			h.Close()
			return err
		}
		return h.Close()
	default:
		return os.Chmod(f, 0o600)
	}
}
