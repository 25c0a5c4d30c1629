package nested

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/themisfs/themis/guest"
	"go.uber.org/zap"
)

// HostModules are what the emulated host loads (dependencies are added by
// guest.Build): the job disk's virtio stack and KVM on AMD-V.
var HostModules = []string{"virtio_pci", "virtio_blk", "kvm_amd"}

// DefaultCPU is the emulated host's CPU: AMD-V with nested paging.
const DefaultCPU = "qemu64,+svm,+npt"

// initPackage is the host image's /init.
const initPackage = "./cmd/themis-nested-init"

// hostCmdline is the emulated host's kernel command line.
const hostCmdline = "console=ttyS0 panic=-1 loglevel=4 mitigations=off audit=0 selinux=0 apparmor=0 kvm_amd.nested=0"

// DebugQEMUArgsEnv names extra arguments for the emulated host's QEMU, for
// debugging it (nothing in the tree sets it).
const DebugQEMUArgsEnv = "THEMIS_NESTED_QEMU_ARGS"

// Options configures Run.
type Options struct {
	CacheDir  string        // guest.Build's cache; default guest.DefaultCacheDir()
	WorkDir   string        // job.img, console.log and out/ go here; must exist
	Stage     *Stage        // the job's root, staged by the caller
	Plan      Plan          // what to run there
	MemoryMiB int           // the emulated host's RAM; default 2048
	CPUs      int           // its vCPUs; default 2
	Accel     string        // QEMU's -accel; default "tcg,thread=multi"
	QEMU      string        // the QEMU binary; default qemu-system-x86_64 in PATH
	CPU       string        // QEMU's -cpu; default DefaultCPU
	Timeout   time.Duration // the whole run, boot to power off; default 30 minutes
	Host      *guest.Image  // the emulated host's image; default BuildHost's
	Log       *zap.Logger
}

// Outcome is a finished run: the init's Result, where its files are, and
// how the emulated host's run ended.
type Outcome struct {
	Result  Result
	OutDir  string        // the job's /out, copied back
	Console string        // the emulated host's console log
	Wall    time.Duration // QEMU start to exit
	// Stopped is the emulated host kernel's signature that made Run stop
	// it (a soft lockup, an RCU stall, a panic), as soon as its console
	// showed it; nil when none did.
	Stopped *Hit
	// Exited is QEMU's exit by itself before the plan was done (a panic,
	// a reset, a QEMU error: "exit status 1: <its stderr>"); "" otherwise.
	Exited string
	// TimedOut: the emulated host did not power off within Options.Timeout.
	TimedOut bool
	// Running is the step that was running when the run ended ("" when
	// the plan ended or no step had started).
	Running string
	watch   *Watcher
}

// Finished says whether every step of the plan has a result.
func (o *Outcome) Finished(p Plan) bool { return len(o.Result.Steps) == len(p.Steps) }

// StepConsole is the console while step ran (the emulated host's kernel
// messages and the init's log; steps' output is not echoed there unless
// the step asks).
func (o *Outcome) StepConsole(step string) []byte {
	if o.watch == nil {
		return nil
	}
	return o.watch.Segment(step)
}

// StepStarted says whether the console showed step's start mark.
func (o *Outcome) StepStarted(step string) bool {
	return o.watch != nil && slices.Contains(o.watch.Started(), step)
}

// Output returns a step's stdout as the job wrote it.
func (o *Outcome) Output(step string) ([]byte, error) {
	return os.ReadFile(filepath.Join(o.OutDir, step+".out"))
}

// BuildHost builds (or finds in the cache) the emulated host's image.
func BuildHost(ctx context.Context, cacheDir string, log *zap.Logger) (*guest.Image, error) {
	img, err := guest.Build(ctx, guest.Options{CacheDir: cacheDir, Modules: HostModules, InitPackage: initPackage, Log: log})
	if err != nil {
		return nil, fmt.Errorf("nested: host image: %w", err)
	}
	return img, nil
}

// Run builds the host image, packs the staged job with its plan into a
// disk, boots the emulated host on it until it powers off (or the timeout
// kills it), and reads the job's /out back.
func Run(ctx context.Context, o Options) (*Outcome, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.CPU == "" {
		o.CPU = DefaultCPU
	}
	if o.Accel == "" {
		o.Accel = "tcg,thread=multi"
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
	if err := o.Plan.Validate(); err != nil {
		return nil, err
	}
	host := o.Host
	if host == nil {
		var err error
		if host, err = BuildHost(ctx, o.CacheDir, o.Log); err != nil {
			return nil, err
		}
	}
	pj, err := json.MarshalIndent(o.Plan, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("nested: plan: %w", err)
	}
	if err := o.Stage.Data(PlanFile, pj, 0o644); err != nil {
		return nil, err
	}
	disk := filepath.Join(o.WorkDir, "job.img")
	if err := MakeDisk(ctx, o.Stage.Root, disk); err != nil {
		return nil, err
	}
	out := &Outcome{Console: filepath.Join(o.WorkDir, "console.log"), OutDir: filepath.Join(o.WorkDir, "out")}
	t0 := time.Now()
	bootErr := boot(ctx, o, host, disk, out)
	out.Wall = time.Since(t0)
	if bootErr != nil {
		return out, bootErr
	}
	// A host stopped or dead mid-step left its journal unreplayed:
	// debugfs reads the disk as is, so replay it first.
	if err := replayJournal(ctx, disk); err != nil {
		return out, err
	}
	if err := fetch(ctx, disk, OutDir, out.OutDir); err != nil {
		return out, err
	}
	b, err := os.ReadFile(filepath.Join(out.OutDir, filepath.Base(ResultFile)))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No step finished: the host died (or was stopped) before the
		// first did, or the init failed; the caller reads which below
		// and in the console.
	case err != nil:
		return out, fmt.Errorf("nested: no result from the emulated host (console: %s): %w", out.Console, err)
	default:
		if err := json.Unmarshal(b, &out.Result); err != nil {
			return out, fmt.Errorf("nested: result: %w", err)
		}
	}
	if out.Stopped == nil && out.Exited == "" && !out.TimedOut && !out.Finished(o.Plan) {
		out.Exited = fmt.Sprintf("it powered off or reset after %d of %d steps (console: %s)", len(out.Result.Steps), len(o.Plan.Steps), out.Console)
	}
	return out, nil
}

// replayJournal replays the job disk's ext4 journal, if it needs it.
func replayJournal(ctx context.Context, disk string) error {
	cmd := exec.CommandContext(ctx, "e2fsck", "-y", "-E", "journal_only", disk)
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 { // 1: the file system was changed (replayed)
		return nil
	}
	if err != nil {
		return fmt.Errorf("nested: e2fsck -E journal_only %s: %w: %s", disk, err, bytes.TrimSpace(b))
	}
	return nil
}

// MakeDisk packs root into a fresh ext4 image at disk with room to spare
// for what the job writes (base images, the ledger, outputs).
func MakeDisk(ctx context.Context, root, disk string) error {
	size, err := treeSize(root)
	if err != nil {
		return err
	}
	const spare = 2 << 30
	mib := (size*5/4+spare)>>20 + 1
	if err := os.Remove(disk); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("nested: %w", err)
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "themis-job", "-E", "root_owner=0:0", "-d", root, disk, strconv.FormatInt(mib, 10)+"M")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nested: mkfs.ext4 -d %s: %w: %s", root, err, bytes.TrimSpace(b))
	}
	return nil
}

func treeSize(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("nested: size of %s: %w", root, err)
	}
	return n, nil
}

// boot runs QEMU until the emulated host powers off, stopping it as soon
// as its console shows its own kernel's signature (Watcher), and records
// how it ended in out. It returns an error only when QEMU could not run
// the host at all (it exited with an error and wrote nothing on the
// console) or ctx ended.
func boot(ctx context.Context, o Options, host *guest.Image, disk string, out *Outcome) error {
	bootCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	qctx, kill := context.WithCancel(bootCtx)
	defer kill()
	out.watch = NewWatcher(func(h Hit) {
		o.Log.Warn("the emulated host's own failure: stopping it", zap.String("signature", h.Signature.String()), zap.String("line", h.Line), zap.String("step", h.Step))
		kill()
	})
	console, err := os.Create(out.Console)
	if err != nil {
		return fmt.Errorf("nested: console log: %w", err)
	}
	defer console.Close()
	watching := make(chan struct{})
	defer close(watching)
	go watchStall(out.watch, o.Plan, watching)
	args := []string{
		"-accel", o.Accel, "-cpu", o.CPU,
		"-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMiB),
		"-nodefaults", "-display", "none", "-no-reboot", "-monitor", "none",
		// The serial console on QEMU's stdout: written to console.log and
		// watched as it comes.
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-kernel", host.Kernel, "-initrd", host.Initramfs, "-append", hostCmdline,
		"-drive", "file=" + disk + ",format=raw,if=virtio,cache=unsafe",
	}
	// Debugging the emulated host itself (e.g. "-d int,cpu_reset -D /tmp/q.log"):
	// extra QEMU arguments, split on spaces.
	args = append(args, strings.Fields(os.Getenv(DebugQEMUArgsEnv))...)
	bin := o.QEMU
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	cmd := exec.CommandContext(qctx, bin, args...)
	cmd.WaitDelay = 10 * time.Second // a child holding the console pipe does not keep us
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(console, out.watch), &stderr
	o.Log.Info("booting the emulated AMD-V host", zap.String("console", out.Console), zap.Int("memory_mib", o.MemoryMiB), zap.Int("cpus", o.CPUs))
	err = cmd.Run()
	if serr := console.Sync(); serr != nil {
		o.Log.Warn("console log", zap.Error(serr))
	}
	out.Running = out.watch.Running()
	if h, ok := out.watch.Hit(); ok {
		out.Stopped = &h
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("nested: %w (console: %s)", ctx.Err(), out.Console)
	case out.Stopped != nil:
	case bootCtx.Err() != nil:
		out.TimedOut = true
	case err != nil && len(out.watch.Started()) == 0 && fileEmpty(out.Console):
		return fmt.Errorf("nested: qemu: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	case err != nil:
		out.Exited = fmt.Sprintf("qemu: %v: %s", err, LastLines(string(bytes.TrimSpace(stderr.Bytes())), 5))
	}
	return nil
}

// stallGrace is how long past a step's own timeout, with a silent
// console, the emulated host is taken as stopped (Watcher.Stalled): the
// init prints the step's end within seconds of its timeout when the
// host's clock runs. stallPoll is how often that is checked.
const (
	stallGrace = 2 * time.Minute
	stallPoll  = 10 * time.Second
)

// watchStall checks w for a stalled emulated host until done closes; the
// watcher's onHit stops the host.
func watchStall(w *Watcher, p Plan, done <-chan struct{}) {
	timeouts := map[string]time.Duration{}
	for _, s := range p.Steps {
		timeouts[s.Name] = time.Duration(s.Timeout)
	}
	timeout := func(step string) time.Duration {
		if t := timeouts[step]; t > 0 {
			return t
		}
		return DefaultStepTimeout
	}
	tick := time.NewTicker(stallPoll)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if _, ok := w.Stalled(timeout, stallGrace); ok {
				return
			}
		}
	}
}

func fileEmpty(p string) bool {
	fi, err := os.Stat(p)
	return err != nil || fi.Size() == 0
}

// fetch copies dir out of the ext4 image with debugfs (the image is never mounted here).
func fetch(ctx context.Context, disk, dir, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("nested: %w", err)
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("nested: %w", err)
	}
	cmd := exec.CommandContext(ctx, "debugfs", "-R", "rdump "+dir+" "+parent, disk)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("nested: debugfs rdump %s: %w: %s", dir, err, bytes.TrimSpace(b))
	}
	if got := filepath.Join(parent, filepath.Base(dir)); got != dst {
		if err := os.Rename(got, dst); err != nil {
			return fmt.Errorf("nested: %w", err)
		}
	}
	return nil
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
