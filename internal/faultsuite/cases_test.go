package faultsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/internal/faultagent"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/server"
	"github.com/themisfs/themis/session"
)

// arm sends the Stat that arms mode in session id's agent and returns its
// answer.
func (s *suite) arm(ctx context.Context, id string, mode faultagent.Mode) (*themisv1.StatResponse, error) {
	return s.c.Stat(ctx, &themisv1.StatRequest{SessionId: id, Lane: s.lane, Path: faultagent.ArmPath(mode)})
}

// armAsync arms mode in a goroutine and returns where its error comes.
func (s *suite) armAsync(t *testing.T, id string, mode faultagent.Mode) <-chan error {
	errc := make(chan error, 1)
	ctx := ctxFor(t, bootWithin)
	go func() {
		_, err := s.arm(ctx, id, mode)
		errc <- err
	}()
	return errc
}

// midCall is how far into a Delay-held call the QEMU is signalled: the
// agent holds the answer for faultagent.DefaultDelay (2 s).
const midCall = 500 * time.Millisecond

// sigstopQEMU stops a session's QEMU with a call in flight: the call ends
// DEADLINE_EXCEEDED by call_timeout_s, the session is unresponsive, the
// daemon and the bystander answer meanwhile, and Delete ends it promptly.
func sigstopQEMU(t *testing.T, s *suite, r *result) {
	id, pid := s.createQEMU(t)
	errc := s.armAsync(t, id, faultagent.Delay)
	time.Sleep(midCall)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP qemu %d: %v", pid, err)
	}
	stopped := time.Now()
	t.Cleanup(func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && err != syscall.ESRCH {
			t.Errorf("SIGCONT qemu %d: %v", pid, err)
		}
	})
	s.probe(t, r) // while the guest is stopped and its call in flight
	select {
	case err := <-errc:
		if code(err) != codes.DeadlineExceeded {
			t.Errorf("the call on the stopped guest: %v, want DEADLINE_EXCEEDED", err)
		}
		r.note("the call ended %s %v after the stop (call_timeout_s %v)", code(err), time.Since(stopped).Round(100*time.Millisecond), callTimeout)
	case <-time.After(callTimeout + 10*time.Second):
		t.Fatalf("the call on the stopped guest still running %v after the stop", time.Since(stopped))
	}
	s.wantState(t, id, themisv1.Session_STATE_UNRESPONSIVE)
	s.probe(t, r)
	r.note("Delete of the unresponsive session took %v", s.delete(t, id, 10*time.Second).Round(time.Millisecond))
	s.wantState(t, id, themisv1.Session_STATE_ENDED)
}

// sigkillQEMU kills a session's QEMU with a call in flight: the call
// fails, the session is failed, and nothing it had is left.
func sigkillQEMU(t *testing.T, s *suite, r *result) {
	id, pid := s.createQEMU(t)
	errc := s.armAsync(t, id, faultagent.Delay)
	time.Sleep(midCall)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL qemu %d: %v", pid, err)
	}
	killed := time.Now()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("the call on the killed guest succeeded")
		}
		r.note("the call failed %s %v after the kill", code(err), time.Since(killed).Round(10*time.Millisecond))
	case <-time.After(callTimeout + 10*time.Second):
		t.Fatalf("the call on the killed guest still running %v after the kill", time.Since(killed))
	}
	r.note("session failed: %s", clip(s.wantState(t, id, themisv1.Session_STATE_FAILED)))
}

// hostileAgent is a fault of the agent's (internal/faultagent) and what the
// daemon must make of it.
type hostileAgent struct {
	mode faultagent.Mode
	// prep runs before the fault is armed (nil: nothing).
	prep func(t *testing.T, s *suite, id string)
	// act is the call the fault answers (nil: the arming Stat itself).
	act func(ctx context.Context, s *suite, id string) error
	// wantErr is in the faulted call's error; "": the call succeeds.
	wantErr string
	// want is the session's state after the call.
	want themisv1.Session_State
}

var (
	garbage   = hostileAgent{mode: faultagent.Garbage, wantErr: "malformed frame", want: themisv1.Session_STATE_FAILED}
	oversized = hostileAgent{mode: faultagent.Oversized, wantErr: "frame too large", want: themisv1.Session_STATE_FAILED}
	stale     = hostileAgent{mode: faultagent.Stale, wantErr: "stale responses", want: themisv1.Session_STATE_FAILED}
	staleFew  = hostileAgent{mode: faultagent.StaleFew, want: themisv1.Session_STATE_RUNNING}
	negSize   = hostileAgent{mode: faultagent.NegSize, prep: writeFile, act: fork, wantErr: "size -1", want: themisv1.Session_STATE_FAILED}
)

// writeFile writes a small regular file on the session's lane.
func writeFile(t *testing.T, s *suite, id string) {
	resp, err := s.c.Apply(ctxFor(t, callTimeout), &themisv1.ApplyRequest{SessionId: id, Op: &themisv1.Op{Op: &themisv1.Op_Write{
		Write: &agentv1.Write{Path: "f", Flags: 0o1 | 0o100 /* O_WRONLY|O_CREAT */, Data: []byte("faultsuite")}}}})
	if err != nil || resp.GetResults()[0].GetErrno() != 0 {
		t.Fatalf("write f: %v %v", resp, err)
	}
}

// fork checkpoints the session (which reads its files' sizes).
func fork(ctx context.Context, s *suite, id string) error {
	_, err := s.c.Fork(ctx, &themisv1.ForkRequest{SessionId: id})
	return err
}

// hostile runs a hostile agent's case: a session of its own, the fault
// armed, the call it answers checked, and the session's state.
func hostile(h hostileAgent) func(t *testing.T, s *suite, r *result) {
	return func(t *testing.T, s *suite, r *result) {
		id, _ := s.create(t)
		if h.prep != nil {
			h.prep(t, s, id)
		}
		resp, err := s.arm(ctxFor(t, callTimeout), id, h.mode)
		if h.act != nil {
			if err != nil {
				t.Fatalf("arming %s: %v", h.mode, err)
			}
			err = h.act(ctxFor(t, callTimeout), s, id)
		}
		switch {
		case h.wantErr == "" && err != nil:
			t.Errorf("the faulted call: %v, want it answered", err)
		case h.wantErr == "" && h.act == nil && resp.GetErrno() != int32(syscall.ENOENT):
			t.Errorf("the faulted Stat: errno %d, want ENOENT", resp.GetErrno())
		case h.wantErr != "" && (err == nil || !strings.Contains(err.Error(), h.wantErr)):
			t.Errorf("the faulted call: %v, want an error saying %q", err, h.wantErr)
		}
		if err != nil {
			r.note("the call: %s", code(err))
		} else {
			r.note("the call answered")
		}
		reason := s.wantState(t, id, h.want)
		s.probe(t, r)
		if h.want != themisv1.Session_STATE_RUNNING {
			r.note("session %s: %s", strings.TrimPrefix(h.want.String(), "STATE_"), clip(reason))
			return
		}
		if _, err := s.c.Stat(ctxFor(t, callTimeout), &themisv1.StatRequest{SessionId: id, Lane: s.lane}); err != nil {
			t.Errorf("Stat after the fault: %v", err)
		}
		r.note("session still running and answering; deleted in %v", s.delete(t, id, 10*time.Second).Round(time.Millisecond))
	}
}

// floodFor is how long the endless log runs before the session is deleted.
const floodFor = 10 * time.Second

// endlessLog has a session's agent flood the console and the kernel log
// while the session keeps answering; the daemon's heap stays bounded, and
// Delete ends the session however busy its guest.
func endlessLog(t *testing.T, s *suite, r *result) {
	id, pid := s.createQEMU(t)
	w0 := wchar(t, pid)
	if _, err := s.arm(ctxFor(t, callTimeout), id, faultagent.Log); err != nil {
		t.Fatalf("arming the log: %v", err)
	}
	heap0 := heapAlloc()
	var calls int
	var slowest time.Duration
	for end := time.Now().Add(floodFor); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		slowest = max(slowest, within(t, callTimeout, "Stat of the flooded session", func(ctx context.Context) error {
			_, err := s.c.Stat(ctx, &themisv1.StatRequest{SessionId: id, Lane: s.lane})
			return err
		}))
		calls++
		s.probe(t, r)
	}
	written := wchar(t, pid) - w0
	heap := int64(heapAlloc()) - int64(heap0)
	if written < faultagent.DefaultLongLine {
		t.Errorf("QEMU wrote %d bytes in %v: the log did not flow (want one line of %d bytes at least)", written, floodFor, faultagent.DefaultLongLine)
	}
	if heap > 64<<20 {
		t.Errorf("the daemon's heap grew by %d MiB during the log", heap>>20)
	}
	s.wantState(t, id, themisv1.Session_STATE_RUNNING)
	r.note("QEMU wrote %.0f MiB (console) in %v; %d Stats of the flooded session answered, the slowest in %v; daemon heap %+.1f MiB",
		float64(written)/(1<<20), floodFor, calls, slowest.Round(time.Millisecond), float64(heap)/(1<<20))
	r.note("Delete of the flooding session took %v", s.delete(t, id, 10*time.Second).Round(time.Millisecond))
}

// wchar is the bytes a process has written (/proc/<pid>/io).
func wchar(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no wchar in /proc/%d/io", pid)
	return 0
}

// heapAlloc is this process's live heap after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// padDomain is the daemon's domain; while pad is set, each explore
// progress message of a run comes with padCount findings of padBytes,
// sent to the stream only (not stored): a real explore finds a handful,
// too few to fill a stream's buffer (DefaultStreamBuffer messages) and
// gRPC's flow-control window in seconds.
type padDomain struct {
	server.ManagedDomain
	pad atomic.Bool
}

const (
	padCount = 320
	padBytes = 16 << 10
)

// Explore implements server.Runs.
func (p *padDomain) Explore(ctx context.Context, o exploration.Options, progress func(exploration.Progress), found func(session.Finding)) (*exploration.Summary, error) {
	if !p.pad.Load() {
		return p.ManagedDomain.Explore(ctx, o, progress, found)
	}
	detail := strings.Repeat("p", padBytes)
	return p.ManagedDomain.Explore(ctx, o, func(pr exploration.Progress) {
		progress(pr)
		for i := range padCount {
			found(session.Finding{ID: fmt.Sprintf("f-pad-%d", i), Kind: "faultsuite-pad", Detail: detail})
		}
	}, found)
}

// neverReads opens an Explore stream on a connection of its own and never
// reads it: the run is cancelled once the stream's buffer has been full
// for stream_stall_s, its session ends saying so, the stream ends
// RESOURCE_EXHAUSTED, and the slot is free.
func neverReads(t *testing.T, s *suite, r *result) {
	s.dom.pad.Store(true)
	defer s.dom.pad.Store(false)
	before := s.sessions(t, true)
	c := dial(t, s.d.Addr()) // its own: an unread stream holds its connection's window
	defer c.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{laneSpec}, Depth: 3, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	run, took := waitRunEnded(t, s.c, before, func() { s.probe(t, r) })
	if !strings.Contains(run.GetReason(), "client not reading") {
		t.Errorf("the run's session ended %s (%s), want it to say the client is not reading", run.GetState(), run.GetReason())
	}
	r.note("the run's session ended %s within %v of booting (stream_stall_s %v): %s", strings.TrimPrefix(run.GetState().String(), "STATE_"),
		took.Round(100*time.Millisecond), streamStall, clip(run.GetReason()))
	n := 0
	for {
		if _, err = stream.Recv(); err != nil {
			break
		}
		n++
	}
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "client not reading") {
		t.Errorf("the stream ended %v, want RESOURCE_EXHAUSTED: client not reading", err)
	}
	r.note("the stream, read at last: %d messages, then %s", n, code(err))
}

// waitRunEnded waits for the session of a run on the daemon behind c
// (the one not in before) to be listed other than running, calling during
// between looks, and returns it with how long it was listed running.
func waitRunEnded(t *testing.T, c *client.Client, before []*themisv1.Session, during func()) (*themisv1.Session, time.Duration) {
	t.Helper()
	var run *themisv1.Session
	var seen time.Time
	for deadline := time.Now().Add(bootWithin); ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run's session: %v, still running %v after its client stopped reading", run, bootWithin)
		}
		for _, in := range listSessions(t, c, true) {
			if !slices.ContainsFunc(before, func(b *themisv1.Session) bool { return b.GetId() == in.GetId() }) {
				run = in
			}
		}
		if run != nil && seen.IsZero() {
			seen = time.Now()
		}
		if run != nil && run.GetState() != themisv1.Session_STATE_RUNNING {
			return run, time.Since(seen)
		}
		during()
	}
}

// sessions lists the in-process daemon's sessions (all: ended and failed too).
func (s *suite) sessions(t *testing.T, all bool) []*themisv1.Session {
	t.Helper()
	return listSessions(t, s.c, all)
}

// listSessions lists the sessions of the daemon behind c.
func listSessions(t *testing.T, c *client.Client, all bool) []*themisv1.Session {
	t.Helper()
	resp, err := c.ListSessions(ctxFor(t, answerWithin), &themisv1.ListSessionsRequest{All: all, PageSize: 1000})
	if err != nil {
		t.Fatalf("ListSessions: %v", err)
	}
	return resp.GetSessions()
}

// Create/delete cycles: defaultCycles in the test command, as many as
// $THEMIS_FAULT_CYCLES says where it is set (CI runs the case alone with
// 50, a step of its own: 50 took 1.5–3 minutes of the test command).
const (
	defaultCycles = 8
	cyclesAtOnce  = 2
	cycleDeadline = bootWithin
)

// cycleCount is $THEMIS_FAULT_CYCLES, or defaultCycles where it is unset.
func cycleCount(t *testing.T) int {
	v := os.Getenv("THEMIS_FAULT_CYCLES")
	if v == "" {
		return defaultCycles
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("THEMIS_FAULT_CYCLES=%q: want a count of 1 to 1000", v)
	}
	return n
}

// createDelete boots, uses and deletes sessions, cyclesAtOnce at a time.
func createDelete(t *testing.T, s *suite, r *result) {
	cycles := cycleCount(t)
	var mu sync.Mutex
	var boots, deletes []time.Duration
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range cyclesAtOnce {
		wg.Go(func() {
			for range jobs {
				boot, del, err := s.cycle(t)
				if err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				boots, deletes = append(boots, boot), append(deletes, del)
				mu.Unlock()
			}
		})
	}
	for i := range cycles {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if len(boots) != cycles {
		t.Errorf("%d of %d cycles completed", len(boots), cycles)
	}
	r.note("%d cycles, %d at a time: create %s, delete %s", len(boots), cyclesAtOnce, spread(boots), spread(deletes))
}

// cycle creates a session, checks it answers, and deletes it.
func (s *suite) cycle(t *testing.T) (boot, del time.Duration, err error) {
	ctx, cancel := context.WithTimeout(t.Context(), cycleDeadline)
	defer cancel()
	t0 := time.Now()
	resp, err := s.c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	if err != nil {
		return 0, 0, fmt.Errorf("create: %w", err)
	}
	boot = time.Since(t0)
	id := resp.GetSession().GetId()
	if st, err := s.c.Stat(ctx, &themisv1.StatRequest{SessionId: id, Lane: s.lane}); err != nil || st.GetErrno() != 0 {
		err = fmt.Errorf("stat %s: %v, %w", id, st, err)
		if _, derr := s.c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: id}); derr != nil {
			err = fmt.Errorf("%w; delete: %w", err, derr)
		}
		return 0, 0, err
	}
	t1 := time.Now()
	if _, err := s.c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
		return 0, 0, fmt.Errorf("delete %s: %w", id, err)
	}
	return boot, time.Since(t1), nil
}

// spread is "median X (min–max)".
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("median %v (%v–%v)", round(ds[len(ds)/2]), round(ds[0]), round(ds[len(ds)-1]))
}

// clip shortens a reason for the report: its first line, 160 bytes.
func clip(s string) string {
	const n = 160
	s, _, _ = strings.Cut(s, "\n")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
