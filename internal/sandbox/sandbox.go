package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Sentinel errors of a run; errors.Is finds them under the context added.
var (
	ErrTimeout = errors.New("host tool timed out")
	ErrSignal  = errors.New("host tool killed by a signal")
	ErrSetup   = errors.New("sandbox setup failed")
)

// Limits bound one run. A zero field takes its value from [Default].
type Limits struct {
	Timeout  time.Duration // wall clock for the whole run
	CPU      time.Duration // RLIMIT_CPU (rounded up to whole seconds)
	Memory   int64         // RLIMIT_AS, bytes
	FileSize int64         // RLIMIT_FSIZE, bytes: the largest file the tool may write (NoFileSizeLimit: none)
	Files    int           // RLIMIT_NOFILE
	Output   int           // bytes of stdout and stderr kept (head and tail)
	// WritableImage lets the tool write the image (a journal replay into
	// the caller's private copy); it is read-only otherwise.
	WritableImage bool
}

// NoFileSizeLimit as Limits.FileSize leaves RLIMIT_FSIZE unlimited:
// xfs_repair refuses to start under any limit (it raises RLIMIT_FSIZE to
// infinity and exits when it cannot); with -n it writes nothing.
const NoFileSizeLimit = -1

// Default is what a zero field of Limits means: generous for e2fsck and
// btrfs check over lane images of a few GiB, and still bounded.
var Default = Limits{Timeout: 10 * time.Minute, CPU: 10 * time.Minute, Memory: 8 << 30,
	FileSize: 64 << 20, Files: 256, Output: 1 << 20}

func (l Limits) orDefault() Limits {
	d := Default
	if l.Timeout > 0 {
		d.Timeout = l.Timeout
	}
	if l.CPU > 0 {
		d.CPU = l.CPU
	}
	if l.Memory > 0 {
		d.Memory = l.Memory
	}
	if l.FileSize > 0 || l.FileSize == NoFileSizeLimit {
		d.FileSize = l.FileSize
	}
	if l.Files > 0 {
		d.Files = l.Files
	}
	if l.Output > 0 {
		d.Output = l.Output
	}
	d.WritableImage = l.WritableImage
	return d
}

// Result is what a run left.
type Result struct {
	Output    []byte        // stdout and stderr together, at most Limits.Output (plus a mark)
	Cut       int64         // bytes of output read and dropped
	ExitCode  int           // the tool's exit status; -1 when it did not exit
	CPU       time.Duration // user + system time of the tool and its children
	Image     string        // the image's path as the tool saw it (in its output)
	Isolation string        // "namespaces", or "none: " and why
}

// Run runs bin with args and then the image's path, under lim (see the
// package doc). err is nil whenever the tool exited, whatever its status
// (res.ExitCode); a timeout wraps [ErrTimeout], a signal [ErrSignal], a
// sandbox that could not be set up [ErrSetup], the caller's context its
// error.
func Run(ctx context.Context, lim Limits, bin string, args []string, image string) (Result, error) {
	lim = lim.orDefault()
	iso := probe()
	res := Result{ExitCode: -1, Image: image, Isolation: "namespaces"}
	if !iso.ok {
		res.Isolation = "none: " + iso.why
	}
	rl, err := rlimitArgs(lim)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	var root string
	var argv []string
	var after func(pid int) error
	switch {
	case iso.ok:
		if root, err = os.MkdirTemp("", "themis-sandbox-"); err != nil {
			return res, fmt.Errorf("%w: %w", ErrSetup, err)
		}
		defer func() {
			if rerr := os.Remove(root); rerr != nil && err == nil {
				err = fmt.Errorf("%w: %w", ErrSetup, rerr)
			}
		}()
		res.Image = "/image"
		argv = isolatedArgv(root, bin, args, image, lim.WritableImage, rl)
	case hasPrlimit():
		argv = append(append(append(append([]string{prlimitBin}, rl...), "--", bin), args...), image)
	default:
		// A host without util-linux (the emulated AMD-V host's minimal
		// root): the limits go on the tool right after its exec.
		argv = append(append([]string{bin}, args...), image)
		after = func(pid int) error { return setRlimits(pid, lim) }
		res.Isolation += "; rlimits set just after exec (no " + prlimitBin + ")"
	}
	err = run(ctx, lim, argv, iso.ok, after, &res)
	return res, err
}

// run starts argv in its own process group, waits for it under lim.Timeout
// and fills res.
func run(ctx context.Context, lim Limits, argv []string, isolated bool, after func(pid int) error, res *Result) error {
	rctx, cancel := context.WithTimeoutCause(ctx, lim.Timeout, ErrTimeout)
	defer cancel()
	out := &capped{half: lim.Output / 2}
	cmd := exec.CommandContext(rctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	cmd.Dir = "/"
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = 2 * time.Second
	var ready, readyW *os.File
	if isolated {
		var err error
		if ready, readyW, err = os.Pipe(); err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		cmd.ExtraFiles = []*os.File{readyW}
	}
	serr := cmd.Start()
	if serr == nil && after != nil {
		serr = after(cmd.Process.Pid)
	}
	if readyW != nil {
		// The child holds its own copy; ours must go for the read to end.
		serr = errors.Join(serr, readyW.Close())
	}
	if serr != nil {
		if ready != nil {
			serr = errors.Join(serr, ready.Close())
		}
		if cmd.Process != nil {
			serr = errors.Join(serr, killGroup(cmd.Process.Pid), cmd.Wait())
		}
		return fmt.Errorf("%w: start %s: %w", ErrSetup, argv[0], serr)
	}
	werr := cmd.Wait()
	// The group may hold a child that outlived the tool (in the pid
	// namespace it died with the tool).
	kerr := killGroup(cmd.Process.Pid)
	res.Output, res.Cut = out.bytes(), out.cut
	err := status(ctx, rctx, lim, cmd, werr, ready, res)
	if ready != nil {
		kerr = errors.Join(kerr, ready.Close())
	}
	if err == nil && kerr != nil {
		err = fmt.Errorf("sandbox: %w", kerr)
	}
	return err
}

// status maps how the run ended onto res and an error.
func status(ctx, rctx context.Context, lim Limits, cmd *exec.Cmd, werr error, ready *os.File, res *Result) error {
	ps := cmd.ProcessState
	if ps != nil {
		res.CPU = ps.UserTime() + ps.SystemTime()
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("host tool: %w", ctx.Err())
	case context.Cause(rctx) == ErrTimeout:
		return fmt.Errorf("%w after %v (process group killed)", ErrTimeout, lim.Timeout)
	case ps == nil:
		return fmt.Errorf("host tool: %w", werr)
	}
	if ready != nil {
		b, err := io.ReadAll(io.LimitReader(ready, 16))
		if err != nil {
			return fmt.Errorf("%w: read the ready pipe: %w", ErrSetup, err)
		}
		if string(b) != "ok" {
			return fmt.Errorf("%w: %s", ErrSetup, strings.TrimSpace(string(res.Output)))
		}
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	sig, signaled := ws.Signal(), ws.Signaled()
	if ready != nil && ws.Exited() && ws.ExitStatus() == 1 && bytes.HasSuffix(bytes.TrimSpace(res.Output), unshareKillBug) {
		// util-linux 2.38's unshare cannot re-raise SIGKILL, its child's
		// death: it says so and exits 1.
		res.Output = bytes.TrimSuffix(bytes.TrimSpace(res.Output), unshareKillBug)
		sig, signaled = syscall.SIGKILL, true
	}
	if signaled {
		if sig == syscall.SIGKILL && res.CPU+time.Second/2 >= lim.CPU {
			return fmt.Errorf("%w: SIGKILL at the CPU limit (%v used, limit %v)", ErrSignal, res.CPU.Round(time.Millisecond), lim.CPU)
		}
		return fmt.Errorf("%w: %s (%v)", ErrSignal, signalName(sig), sig)
	}
	var exit *exec.ExitError
	if werr != nil && !errors.As(werr, &exit) {
		return fmt.Errorf("host tool: %w", werr)
	}
	res.ExitCode = ps.ExitCode()
	return nil
}

// unshareKillBug is what util-linux 2.38's unshare --fork says when its
// child died of SIGKILL (it fails to re-raise it and exits 1).
var unshareKillBug = []byte("unshare: sigprocmask unblock failed: Invalid argument")

// killGroup kills process group pgid; one already gone is no error.
func killGroup(pgid int) error {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sandbox: kill process group %d: %w", pgid, err)
	}
	return nil
}
