package qemu

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/nbd"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/checkpoint"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

var _ vmm.Machine = (*Machine)(nil)
var _ vmm.Hasher = (*Machine)(nil)
var _ vmm.Timings = (*Machine)(nil)
var _ vmm.CheckpointMemory = (*Machine)(nil)
var _ vmm.DiskCounter = (*Machine)(nil)

// readyLine is what the agent prints on the console once it serves its channel.
const readyLine = agent.ReadyLine

// consoleKeep is how many console lines are kept: a dead guest's
// (vmm.GuestDiedError, where a kernel report is read from); consoleShown
// of them go into error messages.
const (
	consoleKeep  = vmm.MaxDeathConsole
	consoleShown = 40
)

// maxConsoleLine is the most bytes of one console line kept (and copied);
// the rest of a longer line is skipped, not waited for.
const maxConsoleLine = 4 << 10

// uartPath is the agent's UART in the guest, where it serves without a
// virtio port.
const uartPath = "/dev/ttyS1"

// stateImage is the work dir's qcow2 that holds the internal snapshots.
const stateImage = "state.qcow2"

var noDeadline time.Time

// kernelCmdline is the guest kernel's command line. Beyond the console and
// panic-means-exit, it trims boot work that costs seconds under TCG: quiet
// console, preset loops-per-jiffy, no TSC watchdog, no speculation
// mitigations (the guest runs only our agent), no audit or LSMs. A vCPU
// that a loaded host leaves unscheduled for seconds (TCG's time follows
// the host's) is no stall of the guest's own: no RCU stall or soft-lockup
// reports, whose stack dumps through the emulated UART would cost it
// seconds more.
const kernelCmdline = "console=ttyS0 panic=-1 quiet lpj=4000000 tsc=reliable no_timer_check mitigations=off audit=0 selinux=0 apparmor=0 " +
	"rcupdate.rcu_cpu_stall_suppress=1 nowatchdog"

// cmdline is the guest kernel's command line: kernelCmdline, the
// fail-fast part (vmm.FailFastCmdline: a kernel fault ends the guest at
// once, its report on the console), then cfg.Cmdline.
func cmdline(cfg vmm.Config) string {
	return strings.TrimSpace(kernelCmdline + " " + vmm.FailFastCmdline(cfg.WarnNotFatal) + " " + cfg.Cmdline)
}

// Machine is a guest running under QEMU.
type Machine struct {
	cfg   vmm.Config
	log   *zap.Logger
	dir   string       // work dir: sockets, state image
	owned *scratch.Dir // dir created by us, held while the machine lives

	cmd     *exec.Cmd
	exited  chan struct{} // closed when QEMU exits
	exitErr error         // valid after exited is closed

	qmp   *qmpClient
	agent *agent.Client
	aconn net.Conn

	nbdCancel context.CancelFunc
	nbdSrv    []*nbd.Server // one per disk, in attach order: DiskCounts
	nbdWG     sync.WaitGroup
	listeners []net.Listener

	ram     *ramFile
	console *consoleTail

	mu     sync.Mutex // serializes Call, Checkpoint, Restore, Close
	closed bool
	path   *checkpoint.Path // the checkpoints and the disks' overlays in lockstep
	memory *memory          // path's memory part
	boot   time.Duration
}

// Start boots a guest and returns once its agent answers.
func Start(ctx context.Context, cfg vmm.Config) (m *Machine, err error) {
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = vmm.DefaultMemoryMiB
	}
	if cfg.Restore == "" {
		cfg.Restore = vmm.RestoreDevices
	}
	if cfg.Restore != vmm.RestoreFull && cfg.Restore != vmm.RestoreDevices {
		return nil, fmt.Errorf("qemu: restore mode %q: want %q or %q", cfg.Restore, vmm.RestoreFull, vmm.RestoreDevices)
	}
	if cfg.AgentChannel == "" {
		cfg.AgentChannel = vmm.AgentVirtio
	}
	if cfg.AgentChannel != vmm.AgentVirtio && cfg.AgentChannel != vmm.AgentUART {
		return nil, fmt.Errorf("qemu: agent channel %q: want %q or %q", cfg.AgentChannel, vmm.AgentVirtio, vmm.AgentUART)
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	if cfg.MemoryMiB < 64 || cfg.MemoryMiB > 16<<10 {
		return nil, fmt.Errorf("qemu: memory %d MiB: want 64..16384", cfg.MemoryMiB)
	}
	for _, f := range []struct{ name, path string }{{"kernel", cfg.Kernel}, {"initramfs", cfg.Initramfs}} {
		if f.path == "" {
			return nil, fmt.Errorf("qemu: no %s given", f.name)
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("qemu: %s: %w", f.name, err)
		}
	}
	for i, d := range cfg.Disks {
		if d.Device == nil {
			return nil, fmt.Errorf("qemu: disk %d: no device", i)
		}
		if d.Serial == "" || len(d.Serial) > 20 || strings.ContainsAny(d.Serial, ",= \t\n") {
			return nil, fmt.Errorf("qemu: disk %d: serial %q: want 1-20 characters without , = or spaces", i, d.Serial)
		}
	}
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("qemu: qemu-system-x86_64 not found (Debian package qemu-system-x86): %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	m = &Machine{cfg: cfg, log: log.Named("vmm.qemu"), exited: make(chan struct{})}
	m.memory = &memory{m: m, held: map[checkpoint.Ref]fork.ID{}}
	m.path = checkpoint.New(checkpoint.Config{Backend: vmm.BackendQEMU, Memory: m.memory, Disks: cfg.Disks, Verify: cfg.Verify})
	defer func() {
		if err != nil {
			if cerr := m.Close(); cerr != nil {
				m.log.Warn("cleanup after failed start", zap.Error(cerr))
			}
			m = nil
		}
	}()
	if cfg.WorkDir != "" {
		m.dir = cfg.WorkDir
	} else {
		dir, err := scratch.MkdirTemp(shmDir(), WorkDirPrefix)
		if err != nil {
			return m, fmt.Errorf("qemu: work dir: %w", err)
		}
		m.dir, m.owned = dir.Path, dir
	}
	t0 := time.Now()
	if err := m.start(ctx, bin); err != nil {
		return m, err
	}
	m.boot = time.Since(t0)
	return m, nil
}

// Names of what a Machine keeps in ScratchDir while it lives: its work dir
// (a scratch.Dir) and its guest RAM file (flocked while linked). A
// daemon's startup sweep (scratch.Sweep) removes those of processes gone.
const (
	WorkDirPrefix = "themis-"
	RAMFilePrefix = "themis-ram-"
)

// ScratchEnv names the environment variable that sets ScratchDir: an
// absolute path, best on a tmpfs (guest RAM is a file there). The fault
// suite (internal/faultsuite) points it at a private dir to count what its
// machines leave.
const ScratchEnv = "THEMIS_SCRATCH_DIR"

// ScratchDir is where machines keep RAM files and work dirs: $THEMIS_SCRATCH_DIR
// when set (ScratchEnv), else /dev/shm when there is one, else the temp dir.
func ScratchDir() string { return shmDir() }

// shmDir is where RAM and scratch state live: tmpfs when there is one.
func shmDir() string {
	if d := os.Getenv(ScratchEnv); d != "" {
		return d
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

func randomID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

func (m *Machine) listen(name string) (net.Listener, string, error) {
	p := filepath.Join(m.dir, name)
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, "", fmt.Errorf("qemu: listen %s: %w", p, err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		l.Close()
		return nil, "", fmt.Errorf("qemu: chmod %s: %w", p, err)
	}
	m.listeners = append(m.listeners, l)
	return l, p, nil
}

// start launches QEMU and waits for its agent: sockets, disks, state and
// RAM files, the process, then QMP and the agent channel.
func (m *Machine) start(ctx context.Context, bin string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BootTimeout)
	defer cancel()

	qmpL, qmpPath, err := m.listen("qmp.sock")
	if err != nil {
		return err
	}
	agentL, agentPath, err := m.listen("agent.sock")
	if err != nil {
		return err
	}
	diskArgs, err := m.serveDisks()
	if err != nil {
		return err
	}
	statePath, err := m.createState(ctx)
	if err != nil {
		return err
	}
	if m.cfg.Restore == vmm.RestoreDevices {
		m.memory.sum = &stateSum{path: statePath}
	}
	args := append(m.args(qmpPath, agentPath, statePath), diskArgs...)
	if err := m.launch(bin, args); err != nil {
		return err
	}
	if err := m.connect(ctx, qmpL, agentL); err != nil {
		return err
	}
	return m.waitAgent(ctx)
}

// serveDisks starts one NBD server per overlay and returns QEMU's
// arguments for the disks.
func (m *Machine) serveDisks() ([]string, error) {
	nbdCtx, nbdCancel := context.WithCancel(context.Background())
	m.nbdCancel = nbdCancel
	var diskArgs []string
	for i, d := range m.cfg.Disks {
		p := filepath.Join(m.dir, fmt.Sprintf("nbd%d.sock", i))
		l, err := nbd.Listen(p)
		if err != nil {
			return nil, fmt.Errorf("qemu: disk %s: %w", d.Serial, err)
		}
		srv := &nbd.Server{Backend: d.Device, Log: m.log.Named("nbd").With(zap.String("disk", d.Serial))}
		m.nbdSrv = append(m.nbdSrv, srv)
		m.nbdWG.Add(1)
		go func() {
			defer m.nbdWG.Done()
			if err := srv.Serve(nbdCtx, l); err != nil {
				m.log.Warn("nbd server stopped", zap.String("disk", d.Serial), zap.Error(err))
			}
		}()
		node := fmt.Sprintf("disk%d", i)
		diskArgs = append(diskArgs,
			"-blockdev", fmt.Sprintf("driver=nbd,server.type=unix,server.path=%s,node-name=%s", p, node),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,serial=%s", node, d.Serial))
	}
	return diskArgs, nil
}

// createState creates the scratch qcow2 for CPU/device (and, in full
// mode, RAM) state and the guest RAM file; it returns the qcow2's path.
func (m *Machine) createState(ctx context.Context) (string, error) {
	statePath := filepath.Join(m.dir, stateImage)
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", statePath, "16M").CombinedOutput(); err != nil {
		return "", fmt.Errorf("qemu: qemu-img create (Debian package qemu-utils): %w: %s", err, strings.TrimSpace(string(out)))
	}
	var err error
	m.ram, err = newRAMFile(filepath.Join(shmDir(), RAMFilePrefix+randomID()), int64(m.cfg.MemoryMiB)<<20)
	return statePath, err
}

// args is QEMU's command line but for the disks.
func (m *Machine) args(qmpPath, agentPath, statePath string) []string {
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "pc,accel=tcg,memory-backend=ram0",
		"-m", fmt.Sprintf("%dM", m.cfg.MemoryMiB),
		"-object", fmt.Sprintf("memory-backend-file,id=ram0,size=%dM,mem-path=%s,share=on", m.cfg.MemoryMiB, m.ram.path),
		"-smp", "1",
		"-kernel", m.cfg.Kernel, "-initrd", m.cfg.Initramfs,
		"-append", cmdline(m.cfg),
		"-chardev", "stdio,id=con,signal=off",
		"-device", "isa-serial,chardev=con,index=0",
	}
	args = append(args, agentArgs(m.cfg.AgentChannel, agentPath)...)
	if m.cfg.ICount {
		// One instruction a nanosecond of guest time, and no sleeping: an
		// idle guest's clock jumps to its next timer (docs/replay.md).
		args = append(args, "-icount", "shift=0,sleep=off")
	}
	return append(args,
		"-chardev", fmt.Sprintf("socket,id=qmp,path=%s", qmpPath),
		"-mon", "chardev=qmp,mode=control",
		"-blockdev", fmt.Sprintf("driver=file,filename=%s,node-name=statefile", statePath),
		"-blockdev", "driver=qcow2,file=statefile,node-name=state",
	)
}

// agentArgs puts the agent channel on QEMU's command line: the host's unix
// socket as chardev "agent", on a virtio-serial port named agent.PortName
// (vmm.AgentVirtio) or on the second UART (vmm.AgentUART, the guest's
// ttyS1).
//
// The virtio-serial device is the transitional virtio-serial-pci, like the
// disks (the guest's virtio_pci drives it as a modern device; a legacy-only
// guest could too). max_ports=2: port 0 is reserved for a console and ours
// is port 1; the default 31 ports cost 64 virtqueues the guest sets up at
// every boot and QEMU saves in every snapshot.
func agentArgs(ch vmm.AgentChannel, sock string) []string {
	args := []string{"-chardev", fmt.Sprintf("socket,id=agent,path=%s", sock)}
	if ch == vmm.AgentUART {
		return append(args, "-device", "isa-serial,chardev=agent,index=1")
	}
	return append(args,
		"-device", "virtio-serial-pci,id=agentser,max_ports=2",
		"-device", "virtserialport,bus=agentser.0,nr=1,chardev=agent,name="+agent.PortName)
}

// launch starts QEMU in its own process group, its console on a pipe.
func (m *Machine) launch(bin string, args []string) error {
	m.log.Debug("starting qemu", zap.Strings("args", args))
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stdin = nil
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("qemu: console pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	m.console = newConsoleTail(m.cfg.Console)
	if err := startHeld(cmd, func(err error) { m.exitErr = err; close(m.exited) }); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("qemu: start %s: %w", bin, err)
	}
	m.cmd = cmd
	if err := pw.Close(); err != nil {
		m.log.Warn("close console pipe writer", zap.Error(err))
	}
	go m.console.run(pr)
	return nil
}

// startHeld starts cmd from a goroutine locked to its OS thread, which
// then waits for it and calls exited with Wait's error. Pdeathsig is sent
// when the thread that forked the child exits, not the process: Go may
// end a thread while the daemon lives (a goroutine that ends locked to it,
// as a KVM vCPU's does), which would SIGKILL a QEMU forked from it. Held
// by the wait, the thread lives as long as QEMU; a SIGKILLed daemon takes
// it, and QEMU, with it.
func startHeld(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the wait
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}

// connect accepts QEMU's QMP and agent connections, sets the migration
// capability of the devices-only mode and maps guest RAM.
func (m *Machine) connect(ctx context.Context, qmpL, agentL net.Listener) error {
	qconn, err := m.accept(ctx, qmpL, "qmp")
	if err != nil {
		return err
	}
	if m.qmp, err = newQMP(ctx, qconn, m.log); err != nil {
		qconn.Close()
		return m.died(err)
	}
	m.aconn, err = m.accept(ctx, agentL, "agent channel")
	if err != nil {
		return err
	}
	m.agent = agent.NewClient(m.aconn, m.log)
	if m.cfg.Restore == vmm.RestoreDevices {
		caps := map[string]any{"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}}}
		if err := m.qmp.Execute(ctx, "migrate-set-capabilities", caps, nil); err != nil {
			return err
		}
	}
	return m.ram.mapIt()
}

// waitAgent waits for the agent's ready line, then a Ping round trip.
func (m *Machine) waitAgent(ctx context.Context) error {
	select {
	case <-m.console.ready:
	case <-m.exited:
		return m.died(errors.New("exited during boot"))
	case <-ctx.Done():
		return fmt.Errorf("qemu: boot: no %q on the console: %w\n%s", readyLine, ctx.Err(), m.console.tail())
	}
	path := m.console.readyPath()
	if m.cfg.AgentChannel == vmm.AgentVirtio && path == uartPath {
		// The agent found no port named agent.PortName; nothing listens on the UART.
		return fmt.Errorf("qemu: boot: the agent serves on %s, not on the virtio port %q (is virtio_console in the image?)\n%s", path, agent.PortName, m.console.tail())
	}
	resp, err := m.call(ctx, &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	if err != nil {
		return fmt.Errorf("qemu: boot: first ping: %w", err)
	}
	m.log.Info("guest ready", zap.String("agent", resp.GetPing().GetVersion()), zap.String("channel", string(m.cfg.AgentChannel)), zap.String("path", path))
	return nil
}

// AgentPath returns the guest device the agent serves on, as its ready
// line names it: /dev/vportNpM on a virtio port, /dev/ttyS1 on the UART.
func (m *Machine) AgentPath() string {
	if m.console == nil {
		return ""
	}
	return m.console.readyPath()
}

// accept waits for QEMU to connect to one of our sockets, or for QEMU to die.
func (m *Machine) accept(ctx context.Context, l net.Listener, what string) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("qemu: accept %s: %w", what, r.err)
		}
		return r.c, nil
	case <-m.exited:
		l.Close()
		return nil, m.died(fmt.Errorf("exited before connecting its %s", what))
	case <-ctx.Done():
		l.Close()
		return nil, fmt.Errorf("qemu: waiting for %s: %w", what, ctx.Err())
	}
}

// consoleDrain bounds how long died waits for the console reader to
// read what a dead QEMU left in its pipe (a kernel's report).
const consoleDrain = 2 * time.Second

// died builds the error for a guest that went away: a
// vmm.GuestDiedError with the console's last lines, read to the end.
func (m *Machine) died(err error) error {
	select {
	case <-m.exited:
		select {
		case <-m.console.done:
		case <-time.After(consoleDrain):
			m.log.Warn("the console of a dead guest was not read to its end", zap.Duration("waited", consoleDrain))
		}
		return &vmm.GuestDiedError{Err: fmt.Errorf("qemu %v: %w", m.exitErr, err), Console: m.console.text(), Shown: consoleShown}
	case <-time.After(200 * time.Millisecond):
		return fmt.Errorf("qemu: %w\nconsole:\n%s", err, m.console.tail())
	}
}

// Call implements vmm.Machine.
func (m *Machine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	return m.call(ctx, req)
}

func (m *Machine) call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := m.agent.Call(ctx, req)
	if err != nil {
		// A broken channel usually means QEMU is going away; wait briefly to tell.
		select {
		case <-m.exited:
			return nil, m.died(err)
		case <-time.After(500 * time.Millisecond):
		}
		return nil, fmt.Errorf("qemu: agent call: %w", err)
	}
	return resp, nil
}

// Disks implements vmm.Machine.
func (m *Machine) Disks() []vmm.Disk { return m.cfg.Disks }

// Timings implements vmm.Timings (the path guards its timings; boot is
// set before the machine is returned).
func (m *Machine) Timings() vmm.TimingInfo { return m.path.Timings(m.boot) }

// DiskCounts implements vmm.DiskCounter: each disk's NBD server's counts.
// The servers are made before boot returns and never replaced.
func (m *Machine) DiskCounts() []nbd.Counts {
	out := make([]nbd.Counts, len(m.nbdSrv))
	for i, s := range m.nbdSrv {
		out[i] = s.Counts()
	}
	return out
}

// CheckpointBytes implements vmm.CheckpointMemory: the RAM deltas
// (RestoreDevices: the shadow, its page digests, the undo pages) and the
// blocks the state image (in ScratchDir, tmpfs: memory) has allocated.
func (m *Machine) CheckpointBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.memory.deltas.bytes()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(m.dir, stateImage), &st); err == nil {
		n += st.Blocks * 512
	}
	return n
}

// RAMHash implements vmm.Hasher.
func (m *Machine) RAMHash(ctx context.Context) ([32]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return [32]byte{}, err
	}
	if err := m.qmp.Execute(ctx, "stop", nil, nil); err != nil {
		return [32]byte{}, m.failed(err)
	}
	h, err := hashRAM(m.ram.mem)
	if err != nil {
		return [32]byte{}, m.memory.broke(err) // the guest stays stopped
	}
	if err := m.qmp.Execute(ctx, "cont", nil, nil); err != nil {
		return [32]byte{}, m.failed(err)
	}
	return h, nil
}

// failed decorates an error with the guest's fate when QEMU died.
func (m *Machine) failed(err error) error {
	select {
	case <-m.exited:
		return m.died(err)
	default:
		return err
	}
}

type jobInfo struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

var jobSeq struct {
	sync.Mutex
	n int
}

// runJob runs a snapshot-* job to its end and returns its error.
func (m *Machine) runJob(ctx context.Context, cmd string, args map[string]any) error {
	jobSeq.Lock()
	jobSeq.n++
	jobID := fmt.Sprintf("%s-%d", cmd, jobSeq.n)
	jobSeq.Unlock()
	args["job-id"] = jobID
	events, unsubscribe := m.qmp.Subscribe()
	defer unsubscribe()
	if err := m.qmp.Execute(ctx, cmd, args, nil); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("qemu: %s: %w", cmd, ctx.Err())
		case <-m.qmp.Done():
			return fmt.Errorf("qemu: %s: %w", cmd, ErrQMPClosed)
		case ev := <-events:
			if ev.Name != "JOB_STATUS_CHANGE" {
				continue
			}
			var d struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil || d.ID != jobID || d.Status != "concluded" {
				continue
			}
			var jobs []jobInfo
			if err := m.qmp.Execute(ctx, "query-jobs", nil, &jobs); err != nil {
				return err
			}
			var jerr string
			for _, j := range jobs {
				if j.ID == jobID {
					jerr = j.Error
				}
			}
			if err := m.qmp.Execute(ctx, "job-dismiss", map[string]any{"id": jobID}, nil); err != nil {
				return err
			}
			if jerr != "" {
				return fmt.Errorf("qemu: %s: %s", cmd, jerr)
			}
			return nil
		}
	}
}

// Close implements vmm.Machine.
func (m *Machine) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	if m.cmd != nil {
		select {
		case <-m.exited:
		default:
			if m.qmp != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := m.qmp.Execute(ctx, "quit", nil, nil); err != nil {
					m.log.Debug("qmp quit", zap.Error(err))
				}
				cancel()
			}
			select {
			case <-m.exited:
			case <-time.After(3 * time.Second):
				if err := syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("qemu: kill: %w", err))
				}
				<-m.exited
			}
		}
	}
	if m.qmp != nil {
		if err := m.qmp.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.aconn != nil {
		if err := m.aconn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("qemu: close agent channel: %w", err))
		}
	}
	for _, l := range m.listeners {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("qemu: close listener: %w", err))
		}
	}
	if m.nbdCancel != nil {
		m.nbdCancel()
		m.nbdWG.Wait()
	}
	if m.console != nil && m.cmd != nil {
		<-m.console.done
	}
	if m.ram != nil {
		if err := m.ram.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := m.owned.Remove(); err != nil {
		errs = append(errs, fmt.Errorf("qemu: remove work dir: %w", err))
	}
	return errors.Join(errs...)
}

// consoleTail copies the console to an optional writer, keeps the last lines
// for error messages, and signals the agent's ready line.
type consoleTail struct {
	w     io.Writer
	mu    sync.Mutex
	lines []string
	path  string // the agent's device, from its ready line
	ready chan struct{}
	done  chan struct{}
}

func newConsoleTail(w io.Writer) *consoleTail {
	return &consoleTail{w: w, ready: make(chan struct{}), done: make(chan struct{})}
}

// run reads the console until it ends. A line of any length is read to
// its end and kept as its first maxConsoleLine bytes (readConsoleLine), so
// one long line neither stops the reader (which would stall QEMU on a full
// pipe) nor grows the tail.
func (c *consoleTail) run(r io.ReadCloser) {
	defer close(c.done)
	defer r.Close()
	br := bufio.NewReaderSize(r, maxConsoleLine)
	readySeen := false
	for {
		line, err := readConsoleLine(br)
		if err != nil {
			return
		}
		if c.w != nil {
			fmt.Fprintln(c.w, line) //nolint:errcheck // console copy is best effort
		}
		c.mu.Lock()
		c.lines = append(c.lines, line)
		if len(c.lines) > consoleKeep {
			c.lines = c.lines[len(c.lines)-consoleKeep:]
		}
		seen := !readySeen && strings.Contains(line, readyLine)
		if seen {
			c.path, _ = agent.ReadyPath(line)
		}
		c.mu.Unlock()
		if seen {
			readySeen = true
			close(c.ready)
		}
	}
}

// readConsoleLine reads one line to its end ("\n", or the end of the
// stream for a last line without one) and returns it without "\r\n" or
// "\n", cut to maxConsoleLine bytes and marked with how many were skipped.
// The error is the read's, returned only once no byte of a line is left.
func readConsoleLine(br *bufio.Reader) (string, error) {
	var line []byte
	read, skipped := 0, 0
	for {
		frag, err := br.ReadSlice('\n')
		read += len(frag)
		if err == nil {
			frag = frag[:len(frag)-1]
		}
		keep := min(len(frag), maxConsoleLine-len(line))
		line = append(line, frag[:keep]...)
		skipped += len(frag) - keep
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && read == 0:
			return "", err
		}
		s := strings.TrimRight(string(line), "\r")
		if skipped > 0 {
			s += fmt.Sprintf(" …(%d bytes skipped)", skipped)
		}
		return s, nil
	}
}

// readyPath is the device the agent's first ready line names ("" before it).
func (c *consoleTail) readyPath() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.path
}

// tail is the last consoleShown lines, indented, for error messages.
func (c *consoleTail) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "  " + strings.Join(c.lines[max(0, len(c.lines)-consoleShown):], "\n  ")
}

// text is every kept line, one per line, for a vmm.GuestDiedError.
func (c *consoleTail) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

// Pid is the QEMU process's id (0 when it did not start): what a test
// stops with SIGSTOP to model a hung guest.
func (m *Machine) Pid() int {
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Kill ends the QEMU process at once, as if it had crashed; calls in flight
// fail with vmm.ErrGuestDied. Close must still be called.
func (m *Machine) Kill() error {
	if m.cmd == nil || m.cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("qemu: kill: %w", err)
	}
	return nil
}
