package nested

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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
	Log       *zap.Logger
}

// Outcome is a finished run: the init's Result and where its files are.
type Outcome struct {
	Result  Result
	OutDir  string        // the job's /out, copied back
	Console string        // the emulated host's console log
	Wall    time.Duration // QEMU start to exit
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
	host, err := BuildHost(ctx, o.CacheDir, o.Log)
	if err != nil {
		return nil, err
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
	bootErr := boot(ctx, o, host, disk, out.Console)
	out.Wall = time.Since(t0)
	if err := fetch(ctx, disk, OutDir, out.OutDir); err != nil {
		return out, errors.Join(bootErr, err)
	}
	b, err := os.ReadFile(filepath.Join(out.OutDir, filepath.Base(ResultFile)))
	if err != nil {
		return out, errors.Join(bootErr, fmt.Errorf("nested: no result from the emulated host (console: %s): %w", out.Console, err))
	}
	if err := json.Unmarshal(b, &out.Result); err != nil {
		return out, errors.Join(bootErr, fmt.Errorf("nested: result: %w", err))
	}
	return out, bootErr
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

// boot runs QEMU until the emulated host powers off.
func boot(ctx context.Context, o Options, host *guest.Image, disk, console string) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	args := []string{
		"-accel", o.Accel, "-cpu", o.CPU,
		"-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMiB),
		"-nodefaults", "-display", "none", "-no-reboot", "-monitor", "none",
		"-serial", "file:" + console,
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
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	o.Log.Info("booting the emulated AMD-V host", zap.String("console", console), zap.Int("memory_mib", o.MemoryMiB), zap.Int("cpus", o.CPUs))
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("nested: the emulated host did not power off within %v: %w\nconsole tail:\n%s", o.Timeout, ctx.Err(), tail(console, 40))
	}
	if err != nil {
		return fmt.Errorf("nested: qemu: %w: %s\nconsole tail:\n%s", err, bytes.TrimSpace(stderr.Bytes()), tail(console, 40))
	}
	return nil
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

// tail returns the last n lines of a file, for error messages.
func tail(p string, n int) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return LastLines(string(b), n)
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
