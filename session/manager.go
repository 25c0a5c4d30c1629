package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/budget"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"go.uber.org/zap"
)

// Config configures a Manager.
type Config struct {
	// StateDir holds the ledger (StateDir/ledger.db). Required.
	StateDir string
	// CacheDir is the guest image and base image cache (default guest.DefaultCacheDir()).
	CacheDir string
	// MakeBase makes the lanes' base images (in CacheDir): baseimage.Make,
	// which session does not import (it reads and rewrites btrfs). Required.
	MakeBase launch.BaseMaker
	// Guest are the image build options; CacheDir is filled from CacheDir.
	Guest guest.Options
	// Image, when set, is the guest image to boot instead of building one
	// (a test whose Start double boots nothing passes an empty one), for
	// lanes of Guest's kernel flavour; a session with a lane that needs
	// the other flavour (guest.FlavorOf) builds that one.
	Image *guest.Image
	// MaxSessions bounds concurrently running sessions (default 4).
	MaxSessions int
	// MaxMemoryMiB bounds the sum of guest RAM over running sessions, in MiB (default 2048).
	MaxMemoryMiB int
	// ManualCheckpoints is the manual pool size per session (default 12); a fork past it is errkind.ErrExhausted.
	ManualCheckpoints int
	// AutoCheckpoints is the auto ring size per session (default 10); a fork past it
	// evicts the oldest live auto checkpoint.
	AutoCheckpoints int
	// MaxRunDuration caps every run (Acquire): past it the run's context
	// ends with cause ErrRunTimeLimit (default DefaultMaxRunDuration).
	MaxRunDuration time.Duration
	// Start boots a machine. Nil: by the session's backend (launch.Choose:
	// "auto" is kvm where /dev/kvm is hardware virtualization, falling back
	// to qemu when the KVM boot fails). Tests may inject a test double,
	// which then serves every backend.
	Start func(ctx context.Context, cfg vmm.Config) (vmm.Machine, error)
	// AgentChannel is every session's agent channel (vmm.Config's; "":
	// the virtio port). The benchmarks set it to compare channels.
	AgentChannel vmm.AgentChannel
	// CallTimeout caps the deadline of every guest call of the session
	// methods (an agent call, a checkpoint, a restore, a checkpoint's
	// delete): the caller's deadline, or this one when it is later or
	// absent (default 60 s, at most an hour). A call that runs past it
	// marks its session unresponsive. Runs have their own (RunCallTimeout).
	CallTimeout time.Duration
	// SessionBudget bounds the host bytes one session keeps beyond its
	// guest RAM: the sectors its overlays hold, the file content kept for
	// RestoreFile and its machine's checkpoint memory (RAM shadow, undo
	// pages, saved states). A write past it fails the session
	// (errkind.ErrExhausted, naming what ran out); a fork past it is refused.
	// Default: DefaultSessionBudget, at most DaemonBudget.
	SessionBudget int64
	// DaemonBudget bounds the same bytes over all sessions together
	// (default: DefaultDaemonBudget).
	DaemonBudget int64
	// OnRestore, when set, observes the duration of every successful restore
	// (e.g. a Prometheus histogram in the daemon). It must not block.
	OnRestore func(time.Duration)
	// Log is the logger (nil: none).
	Log *zap.Logger
}

// State is a session's lifecycle state.
type State string

// Session states.
const (
	StateRunning State = "running"
	StateEnded   State = "ended"  // deleted, or left running when a daemon stopped
	StateFailed  State = "failed" // the guest died or failed to boot
	// StateUnresponsive: running, but a guest call got no answer within
	// its deadline (Config.CallTimeout; Reason says which). Calls still go
	// to the guest, each under its deadline, and the first one answered
	// makes it running again; Delete ends it without waiting on a stuck
	// call. The ledger keeps such a session as running.
	StateUnresponsive State = "unresponsive"
)

// live is whether a session in state st still has its guest.
func (st State) live() bool { return st == StateRunning || st == StateUnresponsive }

// Lane is one filesystem under test in a session.
type Lane struct {
	Name string `json:"name"` // mount name, /lanes/<Name> in the guest
	Spec string `json:"spec"` // the lane spec it was made from
	FS   string `json:"fs"`   // filesystem type
}

// Info describes a session.
type Info struct {
	ID        string
	State     State
	Lanes     []Lane
	Backend   string // "qemu"
	MemoryMiB int
	Restore   vmm.RestoreMode
	Verify    bool
	Created   time.Time
	Ended     time.Time // zero while running
	Reason    string    // why it ended or failed
	Depth     int       // live checkpoints (the current path length)
	// Image is the guest image it booted: kernel, flavour, patches (nil
	// for sessions recorded before it was kept).
	Image *guest.Ref
}

// CreateOptions are the inputs of Create.
type CreateOptions struct {
	Lanes     []string        // lane specs (guest.ParseLaneSpec); at least one
	MemoryMiB int             // guest RAM in MiB, 64..4096 (default 128)
	Restore   vmm.RestoreMode // "" (devices), "devices" or "full"
	Verify    bool            // verify every restore against RAM and disk hashes
	Backend   string          // "", "auto", "qemu" or "kvm"
	// Image is a guest image directory to boot instead of the lanes'
	// flavour's (replay on another kernel): one that `themisctl guest
	// build` made, under CacheDir's images directory ("" the default).
	Image string
	// ICount boots under QEMU's instruction counting (vmm.Config.ICount):
	// QEMU only, so "auto" picks QEMU and "kvm" is refused.
	ICount bool
	// WarnNotFatal lets the guest kernel go on after a WARN
	// (vmm.Config.WarnNotFatal); by default a WARN ends the guest as an
	// Oops does, its report on the console.
	WarnNotFatal bool
	// Spares attaches a spare disk per plain lane (launch.Spec.Spares),
	// for crash runs to mount crash states on (Run.Spare).
	Spares bool
}

// Stats are the Manager's counters.
type Stats struct {
	Running  int   // running sessions
	Created  int64 // sessions created since Open
	Ops      int64 // operations applied (per Apply call)
	Forks    int64 // checkpoints taken
	Restores int64 // successful restores
	Failures int64 // sessions failed
	// BudgetUsed and BudgetLimit are the daemon budget's bytes in use
	// over all sessions (Config.DaemonBudget) and its limit.
	BudgetUsed, BudgetLimit int64
}

// Manager owns the running sessions and the ledger.
type Manager struct {
	cfg    Config
	log    *zap.Logger
	ledger *ledger
	budget *budget.Budget // the daemon's: every session's is under it

	imageMu sync.Mutex
	images  map[string]*guest.Image // per kernel flavour, built once, on first need

	mu           sync.Mutex
	closed       bool                // no new sessions (StopSessions)
	ledgerClosed bool                // Close ran
	sessions     map[string]*session // running sessions
	reserved     int                 // sessions booting (capacity reserved)
	memory       int                 // MiB of running and booting sessions
	boots        *boots              // Creates in flight (shutdown.go)

	created, ops, forks, restores, failures atomic.Int64
}

// Open opens (creating or migrating) the ledger in cfg.StateDir. Sessions
// recorded as running by an earlier daemon are recorded as ended, reason
// "daemon restarted".
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("session: Config.StateDir is required")
	}
	if cfg.MakeBase == nil {
		return nil, errors.New("session: Config.MakeBase is required (baseimage.Make)")
	}
	switch {
	case cfg.CallTimeout < 0 || cfg.CallTimeout > time.Hour:
		return nil, fmt.Errorf("session: Config.CallTimeout %s: want 0 (default 60s) up to 1h", cfg.CallTimeout)
	case cfg.CallTimeout == 0:
		cfg.CallTimeout = 60 * time.Second
	}
	switch cfg.AgentChannel {
	case "", vmm.AgentVirtio, vmm.AgentUART:
	default:
		return nil, fmt.Errorf("session: Config.AgentChannel %q: want %q or %q", cfg.AgentChannel, vmm.AgentVirtio, vmm.AgentUART)
	}
	if cfg.CacheDir == "" {
		d, err := guest.DefaultCacheDir()
		if err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
		cfg.CacheDir = d
	}
	cfg.Guest.CacheDir = cfg.CacheDir
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxSessions, 4)
	def(&cfg.MaxMemoryMiB, 2048)
	def(&cfg.ManualCheckpoints, 12)
	def(&cfg.AutoCheckpoints, 10)
	daemonBudget, err := newBudgets(&cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("session: state dir: %w", err)
	}
	l, err := openLedger(ctx, filepath.Join(cfg.StateDir, "ledger.db"))
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	m := &Manager{cfg: cfg, log: log.Named("session"), ledger: l, budget: daemonBudget, sessions: make(map[string]*session), images: map[string]*guest.Image{}, boots: newBoots()}
	if cfg.Image != nil {
		m.images[guest.FlavorName(cfg.Guest.Flavor)] = cfg.Image
	}
	stale, err := l.runningSessions(ctx)
	if err != nil {
		l.close()
		return nil, fmt.Errorf("session: %w", err)
	}
	now := time.Now()
	for _, id := range stale {
		if err := m.end(ctx, id, StateEnded, now, "daemon restarted"); err != nil {
			l.close()
			return nil, fmt.Errorf("session: %w", err)
		}
	}
	if warning := scratchRoom(qemu.ScratchDir(), cfg.MaxMemoryMiB); warning != "" {
		m.log.Warn(warning)
	}
	return m, nil
}

// end records a session's end in the ledger with a "session.ended" (or
// "session.failed") event.
func (m *Manager) end(ctx context.Context, id string, st State, at time.Time, reason string) error {
	if err := m.ledger.endSession(ctx, id, st, at, reason); err != nil {
		return err
	}
	kind := "session.ended"
	if st == StateFailed {
		kind = "session.failed"
	}
	_, err := m.ledger.insertEvent(ctx, Event{Session: id, Time: at, Kind: kind, Detail: reason})
	return err
}

// Close stops every guest (StopSessions), waits for booting Creates to
// unwind (bounded), and closes the ledger. Idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.ledgerClosed {
		m.mu.Unlock()
		return nil
	}
	m.ledgerClosed = true
	m.mu.Unlock()
	errs := []error{m.StopSessions()}
	m.waitCreates()
	if err := m.ledger.close(); err != nil {
		errs = append(errs, fmt.Errorf("session: close ledger: %w", err))
	}
	return errors.Join(errs...)
}

// Stats returns the Manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	running := len(m.sessions)
	m.mu.Unlock()
	return Stats{
		Running: running, Created: m.created.Load(), Ops: m.ops.Load(),
		Forks: m.forks.Load(), Restores: m.restores.Load(), Failures: m.failures.Load(),
		BudgetUsed: m.budget.Used(), BudgetLimit: m.budget.Limit(),
	}
}

// session is one running guest and its bookkeeping. mu serializes every use
// of the machine and guards every field below it; unlock publishes view,
// the copy of the metadata that readers take without waiting on mu.
type session struct {
	view atomic.Pointer[view]
	// booted is the machine as booted, never cleared: what shut kills
	// without the lock.
	booted vmm.Machine
	// ending is the reason shut ends the session with once it killed the
	// machine under a stuck call: the holder's stop uses it.
	ending atomic.Pointer[string]
	// ended is set by whoever records the end (stop or abandon);
	// abandoned once abandon ended the session without its lock (the view
	// then stays as abandon left it).
	ended, abandoned atomic.Bool

	mu    lock
	info  Info
	specs []guest.LaneSpec
	// guest owns the machine and every lane's disks (launch.Boot); nil
	// once stopped, like mach, its machine.
	guest *launch.Guest
	mach  vmm.Machine
	// devs holds each lane's disk, by lane index; for an overlay lane its
	// upper layer's (the one that changes).
	devs []*overlay.Device
	// run names the run (Acquire's kind) that drives the machine while it
	// lasts: the other session methods refuse the session (errkind.ErrState).
	run string
	// lease is that run while it lasts, nil otherwise; read without mu, so
	// that Delete can cancel a run that holds mu in a machine call.
	lease atomic.Pointer[Run]

	cps    []*Checkpoint               // every checkpoint, oldest first
	vmmID  map[string]vmm.CheckpointID // checkpoint id -> machine id
	seq    int                         // last n of "c-<n>"
	files  map[string]snapshot         // checkpoint id -> files kept for RestoreFile
	blobs  map[string][]byte           // content store, by hex blake3
	blobsz int64
	// budget bounds the host bytes the session keeps (overlays, kept
	// content, checkpoint RAM), under the Manager's; closed with the machine.
	budget *budget.Budget
	// exhausted is the refusal of a write to its overlays, once there was
	// one (overBudget).
	exhausted error
	// image is the guest image CreateOptions.Image named (nil: the lanes'
	// flavour's).
	image *guest.Image
	// icount is CreateOptions.ICount.
	icount bool
	// warnNotFatal is CreateOptions.WarnNotFatal.
	warnNotFatal bool
	// spares is CreateOptions.Spares; spareDevs each lane's spare disk
	// (nil for a lane without one).
	spares    bool
	spareDevs []*overlay.Device
}

func newSessionID() (string, error) { return newID("s-") }

// NewFindingID is a fresh finding id, "f-<12 hex>".
func NewFindingID() (string, error) { return newID("f-") }

// newID is prefix and 12 random hex digits.
func newID(prefix string) (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// ValidateCreate checks o (as Create does), fills its defaults and returns
// the parsed lane specs; a run validates its options with it before it
// boots anything.
func ValidateCreate(o *CreateOptions) ([]guest.LaneSpec, error) {
	if len(o.Lanes) == 0 {
		return nil, errkind.Invalid("lanes", "at least one lane spec is required")
	}
	if len(o.Lanes) > 16 {
		return nil, errkind.Invalid("lanes", "%d lanes: at most 16", len(o.Lanes))
	}
	specs := make([]guest.LaneSpec, len(o.Lanes))
	names := make(map[string]bool)
	for i, s := range o.Lanes {
		spec, err := guest.ParseLaneSpec(s)
		if err != nil {
			return nil, errkind.Invalid(fmt.Sprintf("lanes[%d]", i), "%v", err)
		}
		if names[spec.Name] {
			return nil, errkind.Invalid(fmt.Sprintf("lanes[%d]", i), "duplicate lane name %q (rename one with :name=...)", spec.Name)
		}
		names[spec.Name] = true
		specs[i] = spec
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = vmm.DefaultMemoryMiB
	}
	if o.MemoryMiB < 64 || o.MemoryMiB > 4096 {
		return nil, errkind.Invalid("memory_mib", "%d MiB: want 64..4096", o.MemoryMiB)
	}
	switch o.Restore {
	case "":
		o.Restore = vmm.RestoreDevices
	case vmm.RestoreDevices, vmm.RestoreFull:
	default:
		return nil, errkind.Invalid("restore_mode", "%q: want %q or %q", o.Restore, vmm.RestoreDevices, vmm.RestoreFull)
	}
	switch o.Backend {
	case "", launch.Auto:
		o.Backend = launch.Auto
	case launch.QEMU:
	case launch.KVM: // checked against the host by Create
		if o.ICount {
			return nil, errkind.Invalid("icount", "instruction counting is QEMU TCG's: not with backend %q", launch.KVM)
		}
	default:
		return nil, errkind.Invalid("backend", "%q: want %q, %q or %q", o.Backend, launch.Auto, launch.QEMU, launch.KVM)
	}
	return specs, nil
}

// chooseBackend is the backend o boots on (launch.Choose): QEMU for an
// instruction-counted session (ValidateCreate refused it on "kvm").
func chooseBackend(o CreateOptions) (launch.Choice, error) {
	backend := o.Backend
	if o.ICount {
		backend = launch.QEMU
	}
	return launch.Choose(launch.Probe(), backend)
}

// reserve counts one more session of memoryMiB against the limits, or
// says which one it would pass.
func (m *Manager) reserve(memoryMiB int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("session: manager closed: %w", errkind.ErrState)
	case len(m.sessions)+m.reserved+1 > m.cfg.MaxSessions:
		return fmt.Errorf("session limit reached (max %d running): %w", m.cfg.MaxSessions, errkind.ErrExhausted)
	case m.memory+memoryMiB > m.cfg.MaxMemoryMiB:
		return fmt.Errorf("memory limit reached (%d MiB in use + %d MiB requested > %d MiB): %w", m.memory, memoryMiB, m.cfg.MaxMemoryMiB, errkind.ErrExhausted)
	}
	m.reserved++
	m.memory += memoryMiB
	return nil
}

// bootFailed records session s, whose boot failed with err, as failed
// and returns the error Create returns. A host without room for the
// guest's RAM (vmm.ErrNoRAM) is a limit: errkind.ErrExhausted.
func (m *Manager) bootFailed(ctx context.Context, s *session, err error) error {
	if errors.Is(err, vmm.ErrNoRAM) {
		err = fmt.Errorf("%w: %w", errkind.ErrExhausted, err)
	}
	s.budget.Close()
	s.info.State, s.info.Ended, s.info.Reason = StateFailed, time.Now().UTC(), err.Error()
	m.failures.Add(1)
	if lerr := m.ledger.insertSession(context.WithoutCancel(ctx), &s.info); lerr != nil {
		m.log.Error("record failed session", zap.String("session", s.info.ID), zap.Error(lerr))
	} else {
		m.event(ctx, Event{Session: s.info.ID, Kind: "session.failed", Detail: "boot: " + err.Error()})
	}
	return fmt.Errorf("session %s: boot: %w", s.info.ID, err)
}

// Create validates o, reserves capacity, boots a guest with one overlay disk
// per lane and mounts every lane. The boot runs outside the manager lock.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Info, error) {
	specs, err := ValidateCreate(&o)
	if err != nil {
		return nil, err
	}
	choice, err := chooseBackend(o)
	if err != nil {
		return nil, err
	}
	ctx, done, err := m.beginCreate(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := m.reserve(o.MemoryMiB); err != nil {
		return nil, err
	}
	registered := false
	defer func() {
		if !registered {
			m.mu.Lock()
			m.reserved--
			m.memory -= o.MemoryMiB
			m.mu.Unlock()
		}
	}()

	img, err := m.imageAt(o.Image)
	if err != nil {
		return nil, err
	}
	id, err := newSessionID()
	if err != nil {
		return nil, fmt.Errorf("session id: %w", err)
	}
	s := &session{
		image:  img,
		icount: o.ICount,
		spares: o.Spares, warnNotFatal: o.WarnNotFatal,
		mu: newLock(),
		info: Info{ID: id, State: StateRunning, Backend: o.Backend, MemoryMiB: o.MemoryMiB,
			Restore: o.Restore, Verify: o.Verify, Created: time.Now().UTC()},
		specs: specs, vmmID: make(map[string]vmm.CheckpointID),
		files: make(map[string]snapshot), blobs: make(map[string][]byte),
	}
	if s.budget, err = m.newSessionBudget(id); err != nil {
		return nil, err
	}
	for i, sp := range specs {
		s.info.Lanes = append(s.info.Lanes, Lane{Name: sp.Name, Spec: o.Lanes[i], FS: sp.FS})
	}
	if err := m.boot(ctx, s, choice); err != nil {
		return nil, m.bootFailed(ctx, s, err)
	}
	if err := m.ledger.insertSession(ctx, &s.info); err != nil {
		m.closeMachine(s)
		return nil, err
	}
	m.event(ctx, Event{Session: id, Kind: "session.created", Detail: fmt.Sprintf("%d lanes, %d MiB, restore %s", len(specs), o.MemoryMiB, o.Restore)})
	s.booted = s.mach
	s.publish()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		s.mu.Lock()
		err := m.stop(s, StateEnded, "daemon stopped")
		s.unlock()
		return nil, errors.Join(fmt.Errorf("session: manager closed: %w", errkind.ErrState), err)
	}
	m.reserved--
	m.sessions[id] = s
	registered = true
	m.mu.Unlock()
	m.created.Add(1)
	in := s.info
	return &in, nil
}

// Free is how many more sessions of memoryMiB each (0: the default, 128)
// Create would admit now under the session and memory limits (the
// budgets aside). It is a snapshot: a concurrent Create may take a slot.
func (m *Manager) Free(memoryMiB int) int {
	if memoryMiB <= 0 {
		memoryMiB = 128
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	slots := m.cfg.MaxSessions - len(m.sessions) - m.reserved
	return max(0, min(slots, (m.cfg.MaxMemoryMiB-m.memory)/memoryMiB))
}

// guestImage builds (or finds cached) the guest image of a kernel flavour
// once per Manager: cfg.Guest's, or for the other flavour cfg.Guest
// without its kernel and module choices (the flavour picks them).
func (m *Manager) guestImage(ctx context.Context, flavor string) (*guest.Image, error) {
	m.imageMu.Lock()
	defer m.imageMu.Unlock()
	flavor = guest.FlavorName(flavor)
	if img := m.images[flavor]; img != nil {
		return img, nil
	}
	o := m.cfg.Guest
	if guest.FlavorName(o.Flavor) != flavor {
		// The other flavour is the stock one: the daemon's kernel, module
		// and patch choices are its own flavour's.
		o = guest.Options{CacheDir: o.CacheDir, Flavor: flavor, Agent: o.Agent, InitPackage: o.InitPackage, Log: o.Log}
	}
	if o.Log == nil {
		o.Log = m.log
	}
	img, err := guest.Build(ctx, o)
	if err != nil {
		return nil, err
	}
	m.images[flavor] = img
	return img, nil
}

// boot assembles the session's guest (launch.Boot: an overlay per lane
// over its base image, the machine on the chosen backend or cfg.Start,
// every lane mounted) and records the backend that booted.
func (m *Manager) boot(ctx context.Context, s *session, choice launch.Choice) error {
	img := s.image
	if img == nil {
		var err error
		if img, err = m.guestImage(ctx, guest.FlavorOf(s.specs)); err != nil {
			return err
		}
	}
	s.info.Backend, s.info.Image = choice.Backend, img.Ref()
	g, err := launch.Boot(ctx, launch.Spec{Image: img, MakeBase: m.cfg.MakeBase, CacheDir: m.cfg.CacheDir, Lanes: s.specs,
		MemoryMiB: s.info.MemoryMiB, Restore: s.info.Restore, Verify: s.info.Verify, AgentChannel: m.cfg.AgentChannel, ICount: s.icount, WarnNotFatal: s.warnNotFatal, Spares: s.spares, Backend: choice,
		Charger: s.budget.Account(kindOverlay),
		Start:   m.cfg.Start, Log: m.log.With(zap.String("session", s.info.ID))})
	if err != nil {
		return err
	}
	s.guest, s.mach, s.info.Backend = g, g.Machine, g.Backend
	for _, l := range g.Lanes {
		s.devs, s.spareDevs = append(s.devs, l.Disk), append(s.spareDevs, l.Spare)
	}
	return nil
}

// closeMachine stops the guest and closes the overlays.
func (m *Manager) closeMachine(s *session) error {
	var errs []error
	if s.guest != nil {
		if err := s.guest.Close(); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", s.info.ID, err))
		}
	}
	s.guest, s.mach, s.devs, s.spareDevs = nil, nil, nil, nil
	s.blobs, s.files, s.blobsz = nil, nil, 0
	if s.budget != nil {
		s.budget.Close()
	}
	return errors.Join(errs...)
}

// stop ends a live session: closes its machine, releases its capacity and
// records its end (unless abandon did already). A session that shut is
// ending ends with shut's reason. s.mu is held.
func (m *Manager) stop(s *session, st State, reason string) error {
	if !s.info.State.live() {
		return nil
	}
	if r := s.ending.Load(); r != nil {
		st, reason = StateEnded, *r
	}
	err := m.closeMachine(s)
	s.info.State, s.info.Ended, s.info.Reason = st, time.Now().UTC(), reason
	for _, c := range s.cps {
		c.Live = false
	}
	s.info.Depth = 0
	if !s.ended.CompareAndSwap(false, true) {
		return err
	}
	m.release(s)
	if st == StateFailed {
		m.failures.Add(1)
	}
	if lerr := m.end(context.Background(), s.info.ID, st, s.info.Ended, reason); lerr != nil {
		err = errors.Join(err, lerr)
	}
	return err
}

// machineErr inspects an error from the machine: a dead guest, an agent
// channel that can no longer be used, or an agent that sent an impossible
// response (agent.ErrBadResponse) fails the session. s.mu is held.
func (m *Manager) machineErr(s *session, what string, err error) error {
	if errors.Is(err, vmm.ErrGuestDied) || errors.Is(err, agent.ErrBroken) || errors.Is(err, vmm.ErrClosed) ||
		errors.Is(err, agent.ErrBadResponse) {
		reason := fmt.Sprintf("%s: %v", what, err)
		if serr := m.stop(s, StateFailed, reason); serr != nil {
			m.log.Warn("stop failed session", zap.String("session", s.info.ID), zap.Error(serr))
		}
		if r := s.ending.Load(); r != nil {
			return fmt.Errorf("session %s ended (%s) during %s: %w", s.info.ID, *r, what, err)
		}
		return fmt.Errorf("session %s failed: %s: %w", s.info.ID, what, err)
	}
	return fmt.Errorf("session %s: %s: %w", s.info.ID, what, err)
}

// event records e (time filled in); a ledger failure is logged, not returned:
// the operation it describes already happened.
func (m *Manager) event(ctx context.Context, e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if _, err := m.ledger.insertEvent(context.WithoutCancel(ctx), e); err != nil {
		m.log.Error("record event", zap.String("session", e.Session), zap.String("kind", e.Kind), zap.Error(err))
	}
}

// find returns a live session not leased by a run, from the session map
// and its view, without its lock. Unknown ids are errkind.ErrNotFound; sessions
// that ended or failed are errkind.ErrState.
func (m *Manager) find(ctx context.Context, id string) (*session, error) {
	if id == "" {
		return nil, errkind.Invalid("session_id", "required")
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("session: manager closed: %w", errkind.ErrState)
	}
	s := m.sessions[id]
	m.mu.Unlock()
	if s == nil {
		in, err := m.ledger.session(ctx, id)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("session %q is %s (%s): %w", id, in.State, in.Reason, errkind.ErrState)
	}
	v := s.snapshot()
	if !v.info.State.live() {
		return nil, fmt.Errorf("session %q is %s (%s): %w", id, v.info.State, v.info.Reason, errkind.ErrState)
	}
	if v.run != "" {
		return nil, busyErr(id, v.run)
	}
	return s, nil
}

// lookup returns a live session, locked (find, then its lock, waited for
// until ctx ends).
func (m *Manager) lookup(ctx context.Context, id string) (*session, error) {
	s, err := m.find(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.mu.LockCtx(ctx); err != nil {
		return nil, fmt.Errorf("session %s is busy (a guest call in flight): %w", id, err)
	}
	if !s.info.State.live() {
		st, reason := s.info.State, s.info.Reason
		s.unlock()
		return nil, fmt.Errorf("session %q is %s (%s): %w", id, st, reason, errkind.ErrState)
	}
	if s.run != "" {
		run := s.run
		s.unlock()
		return nil, busyErr(id, run)
	}
	return s, nil
}

// Get returns a session, live (its view: never waits on a busy guest) or
// not (from the ledger).
func (m *Manager) Get(ctx context.Context, id string) (*Info, error) {
	if id == "" {
		return nil, errkind.Invalid("session_id", "required")
	}
	m.mu.Lock()
	s := m.sessions[id]
	m.mu.Unlock()
	if s != nil {
		in := s.snapshot().info
		in.Lanes = append([]Lane(nil), in.Lanes...)
		return &in, nil
	}
	return m.ledger.session(ctx, id)
}

// CacheDir is the guest and base image cache the manager boots from.
func (m *Manager) CacheDir() string { return m.cfg.CacheDir }

// List returns the live sessions (their views), or with all every session
// in the ledger.
func (m *Manager) List(ctx context.Context, all bool) ([]*Info, error) {
	return m.ListPage(ctx, all, PageKey{}, -1)
}

// ListPage is a page of List: up to limit (-1: every) sessions after key
// in (created, id) order. With all the page is read from the ledger (in
// SQL, not the whole table), the live sessions in it shown as their views.
func (m *Manager) ListPage(ctx context.Context, all bool, after PageKey, limit int) ([]*Info, error) {
	m.mu.Lock()
	ss := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	live := make(map[string]*Info)
	for _, s := range ss {
		in := s.snapshot().info
		in.Lanes = append([]Lane(nil), in.Lanes...)
		if in.State.live() {
			live[in.ID] = &in
		}
	}
	if all {
		recs, err := m.ledger.sessionsPage(ctx, after, limit)
		if err != nil {
			return nil, err
		}
		for i, r := range recs {
			if in, ok := live[r.ID]; ok {
				recs[i] = in
			}
		}
		return recs, nil
	}
	out := make([]*Info, 0, len(live))
	for _, in := range live {
		out = append(out, in)
	}
	return pageInfos(out, after, limit), nil
}

// pageInfos sorts infos by (created, id) and returns the page of up to
// limit (-1: every) of them after key.
func pageInfos(infos []*Info, after PageKey, limit int) []*Info {
	key := func(in *Info) PageKey { return PageKey{Created: in.Created, ID: in.ID} }
	sort.Slice(infos, func(i, j int) bool { return key(infos[j]).After(key(infos[i])) })
	out := infos[:0]
	for _, in := range infos {
		if key(in).After(after) && (limit < 0 || len(out) < limit) {
			out = append(out, in)
		}
	}
	return out
}

// Delete stops a live session's guest; its record stays, as ended. It is
// bounded whatever the guest does (shut): a call stuck on the session is
// ended by killing its machine. A session busy with a run has its run
// cancelled (cause ErrRunDeleted); Delete returns once the run has ended
// it, or with an error when ctx ends first.
func (m *Manager) Delete(ctx context.Context, id string) error {
	if leased, err := m.cancelRun(ctx, id); leased {
		return err
	}
	s, err := m.find(ctx, id)
	if err != nil {
		return err
	}
	err = m.shut(s, "deleted", true)
	if err != nil && s.lease.Load() != nil {
		// A run leased the session between cancelRun and shut (Acquire
		// registers it before it leases it): cancel that run.
		if leased, err := m.cancelRun(ctx, id); leased {
			return err
		}
	}
	return err
}

// errImageRefused is what a client hears for every image
// imageAt refuses, whatever the reason (missing, not a directory, outside
// the image cache, not an image): the answer tells nothing of the host's
// filesystem and does not name the cache. The reason is logged at debug.
var errImageRefused = errkind.Invalid("image", "not a guest image of this daemon's image cache (give a name or key `themisctl guest list` shows, or the directory `themisctl guest build` printed)")

// CheckImage checks that ref ("" the lanes' stock image) names a guest
// image of the daemon's image cache, as Create would (a errkind.FieldError on
// "image" otherwise): a run of several sessions refuses a bad image before
// its first boot.
func (m *Manager) CheckImage(ref string) error {
	_, err := m.imageAt(ref)
	return err
}

// imageAt opens the guest image ref names ("": nil): a name, key or
// directory of the daemon's image cache (guest.Resolve: a client names one
// `themisctl guest build` made; the daemon opens nothing else of the
// host's). Every refusal is errImageRefused.
func (m *Manager) imageAt(ref string) (*guest.Image, error) {
	if ref == "" {
		return nil, nil
	}
	img, err := guest.Resolve(m.cfg.CacheDir, ref)
	if err != nil {
		m.log.Debug("image refused", zap.String("image", ref), zap.Error(err))
		return nil, errImageRefused
	}
	return img, nil
}
