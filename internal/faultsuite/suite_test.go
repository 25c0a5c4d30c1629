package faultsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/server"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// Bounds the suite asserts and runs under.
const (
	// answerWithin is how fast the daemon and the bystander must answer
	// after (and during) every fault (issue 14).
	answerWithin = time.Second
	// callTimeout is the in-process daemon's limits.call_timeout_s.
	callTimeout = 5 * time.Second
	// streamStall is its limits.stream_stall_s.
	streamStall = 2 * time.Second
	// settleWithin bounds the wait for the census to come back to its
	// baseline after a case (QEMU exiting, fds closing, children reaped).
	settleWithin = 15 * time.Second
	// bootWithin bounds a CreateSession.
	bootWithin = 3 * time.Minute
	// laneSpec is every session's one lane.
	laneSpec = "ext2"
	// maxSessions is the in-process daemon's limits.max_sessions: the
	// bystander and the cycles at once of create-delete, so that a slot
	// any earlier case failed to free fails the cycles (RESOURCE_EXHAUSTED).
	maxSessions = 1 + cyclesAtOnce
)

// fault is one case of the suite: it does its fault to the daemon and
// checks what it must; TestFaultSuite then checks the daemon and the
// bystander and the census (suite.after). To add a case, add a row.
type fault struct {
	name string
	// did says what the case does, for the report.
	did string
	run func(t *testing.T, s *suite, r *result)
}

// faults are the cases, in the order they run.
var faults = []fault{
	{"sigstop", "SIGSTOP a session's QEMU mid-call (a Stat the agent holds 2 s)", sigstopQEMU},
	{"sigkill", "SIGKILL a session's QEMU mid-call", sigkillQEMU},
	{"agent-garbage", "the agent answers a frame that does not decode", hostile(garbage)},
	{"agent-oversized", "the agent answers a frame header of MaxFrame+1 bytes", hostile(oversized)},
	{"agent-stale", "the agent sends 100 responses with a stale id first", hostile(stale)},
	{"agent-stale-few", "the agent sends 8 responses with a stale id first", hostile(staleFew)},
	{"agent-negsize", "the agent reports a regular file of size -1 to a Fork", hostile(negSize)},
	{"agent-log", "the agent floods the console (lines of 1 MiB + 4 KiB among short ones) and /dev/kmsg for 10 s", endlessLog},
	{"client-not-reading", "a client opens an Explore stream and never reads it", neverReads},
	{"over-budget", "ask for 4096 MiB of guest RAM; write 4 × 32 MiB into a lane under a 64 MiB session budget; fork a 128 MiB guest under it", overBudget},
	{"shm-enospc", "ENOSPC on /dev/shm (a small tmpfs): CreateSession with the scratch dir, where guest RAM lives, on an 8 MiB tmpfs", shmENOSPC},
	{"sigterm-themisd", "SIGTERM to a themisd process mid-explore, then a restart on its state dir", sigtermThemisd},
	{"statedir-enospc", "ENOSPC on the state dir (the ledger and its WAL on a small tmpfs, filled): ledger writes, then the space freed", statedirENOSPC},
	{"crash-enospc", "ENOSPC on the temp dir (a small tmpfs) where a crash run writes its crash states' images and replays their journals", crashENOSPC},
	{"crash-image-unread", "a client asks a crash run for one state's disk image (8 MiB of data, stream_buffer 8) and never reads the stream", crashImageUnread},
	{"crash-fsck-timeout", "a crash run's host checker (e2fsck) hangs: past the sandbox's timeout (2 s for the case), then SIGKILLed from the host", crashFsckTimeout},
	{"crash-replay-enospc", "ENOSPC on the temp dir inside a crash state's journal replay, after its image copy", crashReplayENOSPC},
	{"sigkill-themisd", "SIGKILL to a themisd process mid-explore, then a restart on its state dir", sigkillThemisd},
	{"sigkill-finding-insert", "SIGKILL to a themisd process holding a finding's ledger insert mid-transaction (a themisfault build), then a restart on its state dir", sigkillFindingInsert},
	{"create-delete", "create/delete cycles with real guests (8; $THEMIS_FAULT_CYCLES)", createDelete},
}

// result is what a case measured, for the report.
type result struct {
	name, did     string
	took, settled time.Duration
	slowest       time.Duration // the slowest answer of the daemon or the bystander
	probes        int
	failed        bool

	mu    sync.Mutex
	notes []string
}

// note adds a measured fact to the report.
func (r *result) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// suite is the in-process daemon and its bystander session.
type suite struct {
	env   *vmmtest.Env
	scope Scope
	base  Census

	dom *padDomain
	d   *server.Daemon
	c   *client.Client

	bystander string       // the session that must answer throughout
	lane      string       // its lane's name (every session's)
	themisd   string       // the themisd binary, for sigterm-themisd
	img       *guest.Image // the fault image the daemon boots
}

// TestFaultSuite runs every fault against one daemon with real guests and
// checks after each that the daemon and a bystander session answer within
// a second and that the census is back to its baseline.
func TestFaultSuite(t *testing.T) {
	longtest.Need(t, "the fault suite (20 cases, 3-5 minutes)")
	start := time.Now()
	env := vmmtest.Setup(t)
	s := newSuite(t, env)
	t.Logf("set up in %v: baseline %s", time.Since(start).Round(time.Millisecond), s.base)
	var results []*result
	for _, f := range faults {
		r := &result{name: f.name, did: f.did}
		results = append(results, r)
		t.Run(f.name, func(t *testing.T) {
			t0 := time.Now()
			f.run(t, s, r)
			r.took = time.Since(t0)
			s.after(t, r)
			r.failed = t.Failed()
		})
	}
	s.shutdown(t)
	t.Logf("fault suite: %v in all\n%s", time.Since(start).Round(time.Second), report(results))
}

// newSuite builds the fault image and themisd, starts the in-process
// daemon over a session manager that boots the fault image, creates the
// bystander and takes the baseline.
func newSuite(t *testing.T, env *vmmtest.Env) *suite {
	t.Helper()
	img := faultImage(t, env)
	s := &suite{env: env, img: img, themisd: filepath.Join(dirs.Work, "themisd"),
		scope: Scope{PID: os.Getpid(), Scratch: dirs.Scratch, Temp: dirs.Temp}}
	goBuild(t, "./cmd/themisd", s.themisd, nil, raceFlags...)

	state := filepath.Join(dirs.Work, "daemon")
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	mgr, err := session.Open(context.Background(), session.Config{StateDir: state, CacheDir: env.CacheDir,
		MakeBase: baseimage.Make, Image: img, CallTimeout: callTimeout, MaxSessions: maxSessions,
		SessionBudget: sessionBudget, DaemonBudget: daemonBudget, Log: log.Named("session")})
	if err != nil {
		t.Fatal(err)
	}
	s.dom = &padDomain{ManagedDomain: server.NewDomain(mgr)}
	s.d, err = server.StartDaemonWith(context.Background(), server.Config{
		Listen: "unix://" + filepath.Join(dirs.Work, "themisd.sock"), StateDir: state,
		Limits: server.Limits{StreamStallS: int(streamStall / time.Second)},
	}, s.dom, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.shutdown(t) })
	s.c = dial(t, s.d.Addr())
	t.Cleanup(func() {
		if err := s.c.Close(); err != nil {
			t.Error(err)
		}
	})

	s.bystander, s.lane = s.create(t)
	if _, err := s.c.Apply(ctxFor(t, callTimeout), &themisv1.ApplyRequest{SessionId: s.bystander,
		Op: &themisv1.Op{Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: "kept", Mode: 0o755}}}}); err != nil {
		t.Fatal(err)
	}
	s.warm(t)
	s.base = s.settle(t, func(Census) bool { return true })
	return s
}

// warm fills, before the baseline, what the daemon opens on demand and
// keeps: the ledger's connection pool (database/sql keeps up to two idle
// connections, two fds each), which a case's concurrent ledger reads
// would otherwise grow for good. It sends bursts of concurrent ledger
// reads and the checks' calls until the daemon's fds stop growing.
func (s *suite) warm(t *testing.T) {
	t.Helper()
	last, stable := -1, 0
	for i := 0; i < 30 && stable < 3; i++ {
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				ctx := ctxFor(t, 10*time.Second)
				if _, err := s.c.ListSessions(ctx, &themisv1.ListSessionsRequest{All: true}); err != nil {
					t.Error(err)
				}
				if _, err := s.c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: s.bystander}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Go(func() { s.probe(t, &result{}) })
		wg.Wait()
		c, err := s.scope.Take()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(c.FDs); n > last {
			last, stable = n, 0
		} else {
			stable++
		}
	}
}

// shutdown stops the in-process daemon (once) and checks that it left
// nothing: no QEMU, empty scratch and temp dirs.
func (s *suite) shutdown(t *testing.T) {
	t.Helper()
	if s.d == nil {
		return
	}
	d := s.d
	s.d = nil
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("daemon shutdown: %v", err)
	}
	c := s.settle(t, func(c Census) bool {
		return len(c.QEMU) == 0 && len(c.Scratch) == 0 && len(c.Temp) == 0 && len(c.Zombies) == 0
	})
	if len(c.QEMU)+len(c.Scratch)+len(c.Temp)+len(c.Zombies) > 0 {
		t.Errorf("after the daemon's shutdown (%v): %s left: QEMU %v, scratch %v, temp %v, zombies %v",
			time.Since(t0).Round(time.Millisecond), c, c.QEMU, c.Scratch, c.Temp, c.Zombies)
	}
}

// after checks, once a case is done, that the daemon and the bystander
// answer within answerWithin, that the case left no session running, and
// that the census comes back to the baseline within settleWithin.
func (s *suite) after(t *testing.T, r *result) {
	t.Helper()
	s.probe(t, r)
	s.reap(t)
	t0 := time.Now()
	c := s.settle(t, func(c Census) bool { return c.Diff(s.base) == "" })
	r.settled = time.Since(t0)
	if d := c.Diff(s.base); d != "" {
		t.Errorf("not back to the baseline %v after the case: %s", settleWithin, d)
	}
}

// settle takes censuses until ok or settleWithin and returns the last.
func (s *suite) settle(t *testing.T, ok func(Census) bool) Census {
	t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		c, err := s.scope.Take()
		if err != nil {
			t.Fatal(err)
		}
		if ok(c) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// probe checks that the daemon is alive (health, ListSessions) and that
// the bystander answers GetSession, Stat and Fingerprint, each within
// answerWithin; it notes the slowest answer in r.
func (s *suite) probe(t *testing.T, r *result) {
	t.Helper()
	for _, p := range []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"Health", func(ctx context.Context) error {
			resp, err := s.c.Health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				err = fmt.Errorf("health %s", resp.GetStatus())
			}
			return err
		}},
		{"ListSessions", func(ctx context.Context) error {
			_, err := s.c.ListSessions(ctx, &themisv1.ListSessionsRequest{})
			return err
		}},
		{"bystander GetSession", func(ctx context.Context) error {
			resp, err := s.c.GetSession(ctx, &themisv1.GetSessionRequest{SessionId: s.bystander})
			if err == nil && resp.GetSession().GetState() != themisv1.Session_STATE_RUNNING {
				err = fmt.Errorf("bystander %s: %s", resp.GetSession().GetState(), resp.GetSession().GetReason())
			}
			return err
		}},
		{"bystander Stat", func(ctx context.Context) error {
			resp, err := s.c.Stat(ctx, &themisv1.StatRequest{SessionId: s.bystander, Lane: s.lane, Path: "kept"})
			if err == nil && resp.GetErrno() != 0 {
				err = fmt.Errorf("stat kept: errno %d", resp.GetErrno())
			}
			return err
		}},
		{"bystander Fingerprint", func(ctx context.Context) error {
			_, err := s.c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: s.bystander})
			return err
		}},
	} {
		took := within(t, answerWithin, p.what, p.call)
		r.mu.Lock()
		r.probes++
		r.slowest = max(r.slowest, took)
		r.mu.Unlock()
	}
}

// within runs call under a deadline of limit and fails t unless it
// returns nil in time; it returns how long the call took.
func within(t *testing.T, limit time.Duration, what string, call func(ctx context.Context) error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	t0 := time.Now()
	err := call(ctx)
	took := time.Since(t0)
	if err != nil {
		t.Errorf("%s: %v after %v (want an answer within %v)", what, err, took.Round(time.Millisecond), limit)
	}
	return took
}

// reap fails t for every session other than the bystander still running,
// and deletes it, so that one case's failure does not spill into the next.
func (s *suite) reap(t *testing.T) {
	t.Helper()
	resp, err := s.c.ListSessions(ctxFor(t, answerWithin), &themisv1.ListSessionsRequest{})
	if err != nil {
		t.Errorf("ListSessions: %v", err)
		return
	}
	for _, in := range resp.GetSessions() {
		if in.GetId() == s.bystander {
			continue
		}
		t.Errorf("session %s still %s after the case", in.GetId(), in.GetState())
		if _, err := s.c.DeleteSession(ctxFor(t, 30*time.Second), &themisv1.DeleteSessionRequest{SessionId: in.GetId()}); err != nil {
			t.Errorf("delete %s: %v", in.GetId(), err)
		}
	}
}

// create boots a session with one ext2 lane on QEMU and returns its id
// and lane name.
func (s *suite) create(t *testing.T) (id, lane string) {
	t.Helper()
	resp, err := s.c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession().GetId(), resp.GetSession().GetLanes()[0].GetName()
}

// createQEMU boots a session as create does and returns its QEMU's pid too
// (the one QEMU of the scratch dir that was not there before).
func (s *suite) createQEMU(t *testing.T) (id string, pid int) {
	t.Helper()
	before, err := s.scope.Take()
	if err != nil {
		t.Fatal(err)
	}
	id, _ = s.create(t)
	after, err := s.scope.Take()
	if err != nil {
		t.Fatal(err)
	}
	var added []int
	for _, p := range after.QEMU {
		if !slices.Contains(before.QEMU, p) {
			added = append(added, p)
		}
	}
	if len(added) != 1 {
		t.Fatalf("QEMU processes new with session %s: %v, want one", id, added)
	}
	return id, added[0]
}

// state returns a session's state and reason.
func (s *suite) state(t *testing.T, id string) (themisv1.Session_State, string) {
	t.Helper()
	resp, err := s.c.GetSession(ctxFor(t, answerWithin), &themisv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatalf("GetSession %s: %v", id, err)
	}
	return resp.GetSession().GetState(), resp.GetSession().GetReason()
}

// wantState fails t unless session id is in state want.
func (s *suite) wantState(t *testing.T, id string, want themisv1.Session_State) string {
	t.Helper()
	got, reason := s.state(t, id)
	if got != want {
		t.Errorf("session %s: %s (%s), want %s", id, got, reason, want)
	}
	return reason
}

// delete deletes a session within limit and returns how long it took.
func (s *suite) delete(t *testing.T, id string, limit time.Duration) time.Duration {
	t.Helper()
	return within(t, limit, "DeleteSession "+id, func(ctx context.Context) error {
		_, err := s.c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: id})
		return err
	})
}

// dial connects to a daemon's unix socket.
func dial(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctxFor(t, 10*time.Second), addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ctxFor is a context that ends after d or with the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// code is err's gRPC code.
func code(err error) codes.Code { return status.Code(err) }

// report is the results as a markdown table.
func report(results []*result) string {
	var b strings.Builder
	b.WriteString("| case | what was done | took | back to baseline | slowest of the daemon's and the bystander's answers | what held |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		verdict := "held"
		if r.failed {
			verdict = "FAILED"
		}
		fmt.Fprintf(&b, "| %s | %s | %v | %v | %v (%d answers) | %s: %s |\n", r.name, r.did, r.took.Round(100*time.Millisecond),
			r.settled.Round(10*time.Millisecond), r.slowest.Round(time.Millisecond), r.probes, verdict, strings.Join(r.notes, "; "))
	}
	return b.String()
}
