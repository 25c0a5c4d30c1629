package vmmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
)

// Y2038 is the value the witness sets: one second past the signed 32-bit limit.
const Y2038 = 1 << 31

// DefaultCycles is how many checkpoint/op/fingerprint/restore cycles the
// Cycles subtest runs, over CycleFiles files (their leaves make the reply
// several KiB).
const (
	DefaultCycles = 200
	// CycleCallTimeout is the deadline of each agent call in Cycles.
	CycleCallTimeout = 2 * time.Minute
	CycleFiles       = 40
)

// SuiteOption changes what the conformance suite runs.
type SuiteOption func(*suiteConfig)

type suiteConfig struct {
	cycles int
	skip   map[string]string // subtest name → why it skips
}

// WithCycles sets the Cycles subtest's count (at least 10).
func WithCycles(n int) SuiteOption { return func(c *suiteConfig) { c.cycles = max(n, 10) } }

// SkipCycles skips the Cycles subtest with the reason given (for a host
// known to fail long runs for reasons of its own; say which).
func SkipCycles(reason string) SuiteOption { return Skip(reason, "Cycles") }

// Skip skips the named subtests with the reason given (say why they
// prove nothing more in this run, or what runs them instead).
func Skip(reason string, names ...string) SuiteOption {
	return func(c *suiteConfig) {
		if c.skip == nil {
			c.skip = map[string]string{}
		}
		for _, n := range names {
			c.skip[n] = reason
		}
	}
}

// Run runs the conformance suite against the QEMU backend (start is
// qemu.Start in one restore mode).
func Run(t *testing.T, start Factory, opts ...SuiteOption) {
	run(t, Setup(t), start, opts...)
}

// RunKVM runs the conformance suite against the KVM backend: it needs
// hardware virtualization, and skips with the reason without it (a failure
// under THEMIS_REQUIRE_KVM=1).
func RunKVM(t *testing.T, start Factory, opts ...SuiteOption) {
	run(t, SetupKVM(t), start, opts...)
}

// suite is the conformance suite's state: the host's images, the backend
// under test and the options.
type suite struct {
	env   *Env
	start Factory
	sc    suiteConfig
}

func run(t *testing.T, env *Env, start Factory, opts ...SuiteOption) {
	s := &suite{env: env, start: start, sc: suiteConfig{cycles: DefaultCycles}}
	for _, o := range opts {
		o(&s.sc)
	}
	for _, st := range s.subtests() {
		t.Run(st.name, func(t *testing.T) {
			if why, ok := s.sc.skip[st.name]; ok {
				t.Skip(why)
			}
			st.f(t)
		})
	}
}

// subtest is one subtest of the conformance suite.
type subtest struct {
	name string
	f    func(*testing.T)
}

// subtests are the suite's subtests, in the order they run.
func (s *suite) subtests() []subtest {
	return []subtest{
		{"BootAndY2038", s.testBootAndY2038},
		{"RestoreSoundness", s.testRestoreSoundness},
		{"Nested", s.testNested},
		{"DeleteMiddleCheckpoint", s.testDeleteMiddleCheckpoint},
		{"StaleTranslatedCode", s.testStaleTranslatedCode},
		{"Cycles", s.testCycles},
		{"HungGuestCleansUp", s.testHungGuestCleansUp},
		{"FailedRestoreBreaks", s.testFailedRestoreBreaks},
		{"ReplayPasses", s.testReplayPasses},
	}
}

// SubtestNames are the names of the suite's subtests, in the order they
// run (the nested job runs each as a step of its own).
func SubtestNames() []string {
	var names []string
	for _, st := range (&suite{}).subtests() {
		names = append(names, st.name)
	}
	return names
}

// guestWith assembles and boots a guest with a lane per spec, mounted
// (launch.Boot with the backend under test), closed at the test's end if
// not before; verify sets the restore verify gate.
func (s *suite) guestWith(t *testing.T, verify bool, specs ...string) *launch.Guest {
	t.Helper()
	lanes, err := guest.ParseLaneSpecs(strings.Join(specs, ","))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g, err := launch.Boot(ctx, launch.Spec{Image: s.env.Image, MakeBase: baseimage.Make, CacheDir: s.env.CacheDir, Lanes: lanes,
		MemoryMiB: 128, Verify: verify, Start: launch.StartFunc(s.start), Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return g
}

// bootWith is guestWith's machine and the lanes' names.
func (s *suite) bootWith(t *testing.T, verify bool, specs ...string) (vmm.Machine, []string) {
	t.Helper()
	g := s.guestWith(t, verify, specs...)
	var names []string
	for _, l := range g.Lanes {
		names = append(names, l.Spec.Name)
	}
	return g.Machine, names
}

// boot is bootWith with the verify gate on.
func (s *suite) boot(t *testing.T, specs ...string) (vmm.Machine, []string) {
	t.Helper()
	return s.bootWith(t, true, specs...)
}

func (s *suite) testBootAndY2038(t *testing.T) {
	m, lanes := s.boot(t, "ext2")
	lane := lanes[0]
	Do(t, m, setClock(Y2038))
	Do(t, m, create(lane, "y2038"))
	st := Do(t, m, stat(lane, "y2038")).GetStat()
	if got := st.GetMtime().GetSec(); got != Y2038-1 {
		t.Errorf("guest stat mtime after setting the clock to %d: got %d, want %d (clamped)", Y2038, got, Y2038-1)
	}
	Do(t, m, syncAll())
	if got := ExtInodeMtime(t, m.Disks()[0].Device, "/y2038"); got != Y2038-1 {
		t.Errorf("on-disk i_mtime: got %d, want %d", got, Y2038-1)
	}
	Do(t, m, umount(lane))
	Do(t, m, remount(lane))
	if got := Do(t, m, stat(lane, "y2038")).GetStat().GetMtime().GetSec(); got != Y2038-1 {
		t.Errorf("mtime after remount: got %d, want %d", got, Y2038-1)
	}
}

func (s *suite) testRestoreSoundness(t *testing.T) {
	m, lanes := s.boot(t, "ext2")
	lane := lanes[0]
	Do(t, m, mkdir(lane, "d"))
	Do(t, m, write(lane, "d/keep", []byte("kept across the branch")))
	root0 := Root(t, m, lane)
	c0 := checkpoint(t, m)
	Do(t, m, write(lane, "d/new", bytes.Repeat([]byte{0x55}, 10000)))
	Do(t, m, writeFill(lane, "d/keep", 5, 4096, 0xff))
	Do(t, m, unlink(lane, "d/keep"))
	Do(t, m, syncAll())
	if bytes.Equal(Root(t, m, lane), root0) {
		t.Fatal("the branch did not change the fingerprint")
	}
	restore(t, m, c0) // the verify gate compares RAM and disk hashes
	if got := Root(t, m, lane); !bytes.Equal(got, root0) {
		t.Errorf("fingerprint after restore %x, want %x", got, root0)
	}
	// The guest keeps working, and the restored disk is consistent with the
	// restored memory: unmount flushes the restored page cache, e2fsck is clean.
	Do(t, m, write(lane, "d/after", []byte("after restore")))
	Do(t, m, umount(lane))
	Fsck(t, m.Disks()[0].Device)
	Do(t, m, remount(lane))
	if got := Do(t, m, stat(lane, "d/after")).GetStat().GetSize(); got != 13 {
		t.Errorf("size of a file written after restore: %d, want 13", got)
	}
}

func (s *suite) testNested(t *testing.T) {
	m, lanes := s.boot(t, "ext2")
	lane := lanes[0]
	r0 := Root(t, m, lane)
	c0 := checkpoint(t, m)
	Do(t, m, mkdir(lane, "a"))
	r1 := Root(t, m, lane)
	c1 := checkpoint(t, m)
	Do(t, m, create(lane, "a/f"))
	restore(t, m, c1)
	if got := Root(t, m, lane); !bytes.Equal(got, r1) {
		t.Errorf("after restore C1: root %x, want %x", got, r1)
	}
	Do(t, m, chmod(lane, "a", 0o700))
	restore(t, m, c0)
	if got := Root(t, m, lane); !bytes.Equal(got, r0) {
		t.Errorf("after restore C0: root %x, want %x", got, r0)
	}
	if ids := m.Checkpoints(); len(ids) != 1 || ids[0] != c0 {
		t.Errorf("path after restore C0: %v, want [%d]", ids, c0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Restore(ctx, c1); !errors.Is(err, vmm.ErrUnknownCheckpoint) {
		t.Errorf("restore of a dropped checkpoint: %v, want ErrUnknownCheckpoint", err)
	}
	// Again, several times from the same checkpoint (the DFS pattern).
	for i := range 3 {
		Do(t, m, mkdir(lane, "again"))
		restore(t, m, c0)
		if got := Root(t, m, lane); !bytes.Equal(got, r0) {
			t.Errorf("round %d: root %x, want %x", i, got, r0)
		}
	}
}

func (s *suite) testDeleteMiddleCheckpoint(t *testing.T) {
	m, lanes := s.boot(t, "ext2")
	lane := lanes[0]
	r0 := Root(t, m, lane)
	c0 := checkpoint(t, m)
	Do(t, m, mkdir(lane, "one"))
	c1 := checkpoint(t, m)
	Do(t, m, mkdir(lane, "two"))
	r2 := Root(t, m, lane)
	c2 := checkpoint(t, m)
	Do(t, m, mkdir(lane, "three"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Delete(ctx, c1); err != nil {
		t.Fatalf("delete c1: %v", err)
	}
	restore(t, m, c2)
	if got := Root(t, m, lane); !bytes.Equal(got, r2) {
		t.Errorf("restore c2 after deleting c1: root %x, want %x", got, r2)
	}
	restore(t, m, c0)
	if got := Root(t, m, lane); !bytes.Equal(got, r0) {
		t.Errorf("restore c0 after deleting c1: root %x, want %x", got, r0)
	}
	if err := m.Delete(ctx, c0); err != nil {
		t.Fatalf("delete c0: %v", err)
	}
	if ids := m.Checkpoints(); len(ids) != 0 {
		t.Errorf("path after deleting everything: %v", ids)
	}
	// The machine still checkpoints and restores.
	c3 := checkpoint(t, m)
	Do(t, m, mkdir(lane, "four"))
	restore(t, m, c3)
	if got := Root(t, m, lane); !bytes.Equal(got, r0) {
		t.Errorf("restore after re-arming: root %x, want %x", got, r0)
	}
}

func (s *suite) testStaleTranslatedCode(t *testing.T) {
	// Program B is in the page cache at the checkpoint; A overwrites the
	// same pages in place (no O_TRUNC: a truncate would free them and A
	// would land in other pages, where a stale translation of A is never
	// looked up for B) and runs; after the restore the pages hold B again
	// (put back from beneath the guest), and running it must run B. A
	// QEMU that skipped its translation flush on restore passed the
	// O_TRUNC version and fails this one (docs/benchmarks.md, issue 31
	// item 3).
	m, lanes := s.boot(t, "ext2")
	lane := lanes[0]
	progA, progB := TinyELF(ExitCode(1)), TinyELF(ExitCode(2))
	Do(t, m, write(lane, "prog", progB))
	Do(t, m, chmod(lane, "prog", 0o755))
	c0 := checkpoint(t, m)
	Do(t, m, &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: lane, Path: "prog", Flags: 0o1 /* O_WRONLY */, Data: progA}}})
	if got := Do(t, m, execReq(lane, "prog", 10*time.Second)).GetExec().GetExitCode(); got != 1 {
		t.Fatalf("program A exited %d, want 1", got)
	}
	restore(t, m, c0)
	if got := Do(t, m, execReq(lane, "prog", 10*time.Second)).GetExec().GetExitCode(); got != 2 {
		t.Errorf("after restore the program exited %d, want 2 (stale translated code?)", got)
	}
}

func (s *suite) testCycles(t *testing.T) {
	// The explore loop's pattern, many times: checkpoint, one op, a
	// fingerprint with leaves (a reply of several KiB), restore. On the
	// KVM backend this hung intermittently; every call has a deadline,
	// so a hang fails here with the cycle it stopped in. The deadline of
	// the op and the fingerprint is CycleCallTimeout: a hang never ends,
	// but on a loaded 2-core CI host, next to other guests, one call has
	// taken over 30 s; the slowest call is logged. No verify gate
	// (it hashes all RAM twice a cycle): every tenth restore is checked
	// by the fingerprint instead, and the last one by both.
	m, lanes := s.bootWith(t, false, "ext2")
	lane := lanes[0]
	for i := range CycleFiles {
		Do(t, m, create(lane, fmt.Sprintf("file-with-a-longer-name-%02d", i)))
	}
	r0 := Root(t, m, lane)
	c0 := checkpoint(t, m)
	start := time.Now()
	var slowest time.Duration
	call := func(req *agentv1.Request) *agentv1.Response {
		t.Helper()
		t0 := time.Now()
		resp := DoWithin(t, m, req, CycleCallTimeout)
		slowest = max(slowest, time.Since(t0))
		return resp
	}
	for i := range s.sc.cycles {
		if i%50 == 0 {
			t.Logf("cycle %d of %d after %v (slowest call %v)", i, s.sc.cycles, time.Since(start).Round(time.Millisecond), slowest.Round(time.Millisecond))
		}
		c := checkpoint(t, m)
		call(chmod(lane, fmt.Sprintf("file-with-a-longer-name-%02d", i%CycleFiles), 0o600))
		fp := call(fingerprintLeaves(lane)).GetFingerprint()
		if n := proto.Size(fp); n < 2<<10 {
			t.Fatalf("cycle %d: fingerprint reply of %d bytes, want several KiB", i, n)
		}
		restore(t, m, c)
		if i%10 == 0 {
			if got := Root(t, m, lane); !bytes.Equal(got, r0) {
				t.Fatalf("cycle %d: root after restore %x, want %x", i, got, r0)
			}
		}
		if i%5 == 4 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := m.Delete(ctx, c)
			cancel()
			if err != nil {
				t.Fatalf("cycle %d: delete: %v", i, err)
			}
		}
	}
	restore(t, m, c0)
	if got := Root(t, m, lane); !bytes.Equal(got, r0) {
		t.Errorf("after %d cycles and a restore: root %x, want %x", s.sc.cycles, got, r0)
	}
	el := time.Since(start)
	t.Logf("%d cycles in %v (%v per cycle, slowest call %v)", s.sc.cycles, el.Round(time.Millisecond), (el / time.Duration(s.sc.cycles)).Round(time.Microsecond), slowest.Round(time.Millisecond))
}

func (s *suite) testHungGuestCleansUp(t *testing.T) {
	check := Leaks(t)
	g := s.guestWith(t, true, "ext2")
	m := g.Machine
	spin := installSpin(t, m, g.Lanes[0].Spec.Name)
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := m.Call(short, spin)
	if err == nil {
		t.Fatal("a call into a guest that never answers returned no error")
	}
	t.Logf("hung call: %v", err)
	if err := m.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := m.Call(context.Background(), syncAll()); !errors.Is(err, vmm.ErrClosed) {
		t.Errorf("call after close: %v, want ErrClosed", err)
	}
	if err := g.Close(); err != nil { // the overlays (the machine is closed)
		t.Errorf("close the guest: %v", err)
	}
	check()
}

// testFailedRestoreBreaks changes a checkpoint's disk image behind the
// machine's back, so that the verify gate fails the restore: the machine is
// then broken (vmm.ErrBroken, which wraps vmm.ErrGuestDied), every later
// call says so, and Close still works.
func (s *suite) testFailedRestoreBreaks(t *testing.T) {
	m, _ := s.boot(t, "ext2")
	c1 := checkpoint(t, m)
	dev := m.Disks()[0].Device
	// Down to the layer that holds the checkpoint's image, a write there,
	// and back up: the depths stay in lockstep, the image does not.
	if err := dev.Pop(); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.WriteAt(bytes.Repeat([]byte{0xa5}, 512), dev.Size()-512); err != nil {
		t.Fatal(err)
	}
	dev.Push()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := m.Restore(ctx, c1)
	if !errors.Is(err, vmm.ErrVerify) || !errors.Is(err, vmm.ErrBroken) || !errors.Is(err, vmm.ErrGuestDied) {
		t.Fatalf("restore of a changed checkpoint: %v, want ErrVerify, ErrBroken and ErrGuestDied", err)
	}
	_, cerr := m.Checkpoint(ctx)
	_, callErr := m.Call(ctx, syncAll())
	for name, err := range map[string]error{"call": callErr, "checkpoint": cerr, "restore": m.Restore(ctx, c1), "delete": m.Delete(ctx, c1)} {
		if !errors.Is(err, vmm.ErrBroken) || !errors.Is(err, vmm.ErrVerify) {
			t.Errorf("%s after the failed restore: %v, want ErrBroken wrapping the cause", name, err)
		}
	}
}

// replayPasses is how many times testReplayPasses runs its ops.
const replayPasses = 4

// testReplayPasses is the paper's Table 13 on this backend (docs/replay.md):
// the same ops, each after the guest clock is pinned, run replayPasses
// times from one checkpoint on ext2 (whole-second times; no new inode, so
// no random generation number) leave fewer distinct disks than passes. The
// RAM hashes (where the backend hashes RAM) are counted and logged, not
// judged.
func (s *suite) testReplayPasses(t *testing.T) {
	m, lanes := s.bootWith(t, false, "ext2")
	lane := lanes[0]
	Do(t, m, create(lane, "f"))
	Do(t, m, syncAll())
	c0 := checkpoint(t, m)
	disks, rams := map[[32]byte]bool{}, map[[32]byte]bool{}
	for range replayPasses {
		restore(t, m, c0)
		for i, op := range []*agentv1.Request{writeFill(lane, "f", 0, 4096, 0x55), chmod(lane, "f", 0o600), syncAll()} {
			Do(t, m, setClock(1_700_000_000+int64(i)))
			Do(t, m, op)
		}
		disk, err := m.Disks()[0].Device.Hash()
		if err != nil {
			t.Fatal(err)
		}
		disks[disk] = true
		if h, ok := m.(vmm.Hasher); ok {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			ram, err := h.RAMHash(ctx)
			cancel()
			if err != nil {
				t.Fatalf("RAM hash: %v", err)
			}
			rams[ram] = true
		}
	}
	t.Logf("replay fidelity: %d passes, clock pinned: %d distinct disks, %d distinct RAM images", replayPasses, len(disks), len(rams))
	if len(disks) >= replayPasses {
		t.Errorf("%d distinct disks of %d passes with the clock pinned: want fewer (docs/replay.md)", len(disks), replayPasses)
	}
}

func checkpoint(t testing.TB, m vmm.Machine) vmm.CheckpointID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := m.Checkpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return id
}

func restore(t testing.TB, m vmm.Machine, id vmm.CheckpointID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Restore(ctx, id); err != nil {
		t.Fatalf("restore %d: %v", id, err)
	}
}
