package faultsuite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the ledger's driver

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/session"
)

// kill sends SIGKILL and waits for the exit (the kernel's, so within
// exitWithin whatever the daemon was doing); it returns how long it took.
func (d *themisd) kill(t *testing.T) time.Duration {
	t.Helper()
	t0 := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL themisd: %v", err)
	}
	select {
	case <-d.exited:
	case <-time.After(exitWithin):
		t.Fatalf("themisd still running %v after SIGKILL", exitWithin)
	}
	var ee *exec.ExitError
	if !errors.As(d.err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("themisd after SIGKILL: %v, want killed by the signal", d.err)
	}
	return time.Since(t0)
}

// ledgerIntegrity runs PRAGMA integrity_check on a ledger opened read-only
// with the daemon's driver and fails t unless it says "ok".
func ledgerIntegrity(t *testing.T, file string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	var got []string
	rows, err := db.QueryContext(ctxFor(t, 30*time.Second), "PRAGMA integrity_check")
	if err != nil {
		t.Fatalf("ledger %s: integrity_check: %v", file, err)
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		got = append(got, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "ok" {
		t.Errorf("ledger %s: integrity_check: %q, want ok", file, got)
	}
}

// sigkillThemisd runs a real themisd, starts an explore read by the client
// and SIGKILLs the daemon once the search is under way (its first progress
// message): the explore's QEMUs die with it (Pdeathsig), the ledger it
// left passes integrity_check, and a themisd restarted on the same state
// dir at once (no 5-minute grace) sweeps the RAM files and work dirs the
// killed one left, lists the explore's sessions ended ("daemon
// restarted"), and boots and serves a new session; SIGTERM ends it.
func sigkillThemisd(t *testing.T, s *suite, r *result) {
	k := newKilled(t, s, "themisd-killed", s.themisd)
	d := k.start(t)
	c := dial(t, d.addr)
	defer c.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{laneSpec}, Depth: 4, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	first, streamEnd := make(chan struct{}), make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			if _, err := stream.Recv(); err != nil {
				streamEnd <- err
				return
			}
			if n == 0 {
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case err := <-streamEnd:
		t.Fatalf("the explore's stream ended before its first message: %v", err)
	case <-time.After(bootWithin):
		t.Fatalf("no message on the explore's stream %v after its start", bootWithin)
	}
	k.kill(t, s, r, d, c, "at the explore's first progress message", streamEnd)
	d, c2 := k.restart(t, s, r)
	defer c2.Close()
	k.servesNewSession(t, r, d, c2)
}

// killed is a themisd of the suite's that a case SIGKILLs mid-run and
// then starts again, as the production build, on the same state dir.
type killed struct {
	bin, config, sock, log, ledger string
	themisd                        string // the production build, restarted
}

// newKilled writes the config of a themisd (bin) in dirs.Work/name.
func newKilled(t *testing.T, s *suite, name, bin string) killed {
	t.Helper()
	dir := filepath.Join(dirs.Work, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := killed{bin: bin, log: filepath.Join(dir, "themisd.log"), ledger: filepath.Join(dir, "state", "ledger.db"), themisd: s.themisd}
	k.config, k.sock = themisdConfig(t, dir, s.env.CacheDir)
	return k
}

// start starts k's themisd with env.
func (k killed) start(t *testing.T, env ...string) *themisd {
	t.Helper()
	return startThemisd(t, k.bin, k.config, k.sock, k.log, env...)
}

// kill SIGKILLs d (c its client) while a run of its, whose stream ends on
// streamEnd, is under way (at: where), and checks that the stream ends.
func (k killed) kill(t *testing.T, s *suite, r *result, d *themisd, c *client.Client, at string, streamEnd <-chan error) {
	t.Helper()
	run := waitRunning(t, c)
	live, err := s.scope.Take()
	if err != nil {
		t.Fatal(err)
	}
	r.note("SIGKILL %s (%v after its session's creation; %d QEMU of its own): themisd gone in %v", at,
		time.Since(run.GetCreateTime().AsTime()).Round(100*time.Millisecond), len(live.QEMU)-len(s.base.QEMU), d.kill(t).Round(time.Millisecond))
	select {
	case err := <-streamEnd:
		r.note("the stream ended %s", code(err))
	case <-time.After(10 * time.Second):
		t.Error("the run's stream still open 10s after themisd was killed")
	}
}

// restart checks what the killed daemon left (its QEMUs gone, the
// ledger's integrity_check), starts the production themisd on the same
// state dir, checks that its sweep brought the census back to the
// baseline and that it lists the killed daemon's sessions ended ("daemon
// restarted"), and returns it and a client of it.
func (k killed) restart(t *testing.T, s *suite, r *result) (*themisd, *client.Client) {
	t.Helper()
	t0 := time.Now()
	dead := s.settle(t, func(c Census) bool { return len(c.QEMU) == len(s.base.QEMU) })
	if len(dead.QEMU) != len(s.base.QEMU) {
		t.Errorf("QEMU of the killed themisd: %v left %v after the kill (baseline %v)", dead.QEMU, settleWithin, s.base.QEMU)
	}
	ledgerIntegrity(t, k.ledger)
	r.note("its QEMUs gone in %v; left: %d scratch and %d temp entries; the ledger's integrity_check ok",
		time.Since(t0).Round(10*time.Millisecond), len(dead.Scratch)-len(s.base.Scratch), len(dead.Temp)-len(s.base.Temp))

	t0 = time.Now()
	d := startThemisd(t, k.themisd, k.config, k.sock, k.log)
	started := time.Since(t0)
	c := dial(t, d.addr)
	got, err := s.scope.Take()
	if err != nil {
		t.Fatal(err)
	}
	got.FDs = s.base.FDs       // this process's: the case's client and log are open
	got.Others = s.base.Others // the restarted themisd is this process's child
	if diff := got.Diff(s.base); diff != "" {
		t.Errorf("after the restart (the sweep): %s", diff)
	}
	restarted(t, c, r)
	r.note("restarted in %v (the socket left by the kill replaced, the leftovers swept)", started.Round(10*time.Millisecond))
	return d, c
}

// servesNewSession boots a session on the restarted daemon d (c its
// client), checks that it answers, deletes it, stops d (SIGTERM) and
// checks the ledger again.
func (k killed) servesNewSession(t *testing.T, r *result, d *themisd, c *client.Client) {
	t.Helper()
	resp, err := c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	if err != nil {
		t.Fatalf("CreateSession after the restart: %v", err)
	}
	id := resp.GetSession().GetId()
	within(t, answerWithin, "Stat on the restarted daemon", func(ctx context.Context) error {
		_, err := c.Stat(ctx, &themisv1.StatRequest{SessionId: id, Lane: resp.GetSession().GetLanes()[0].GetName()})
		return err
	})
	if _, err := c.DeleteSession(ctxFor(t, 30*time.Second), &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Error(err)
	}
	r.note("a new session booted and answered; SIGTERM: exit 0 in %v", d.stop(t).Round(time.Millisecond))
	ledgerIntegrity(t, k.ledger)
}

// restarted checks, on a daemon restarted after a kill, that it lists
// none of the killed daemon's sessions running, and that those it had
// running are ended saying "daemon restarted".
func restarted(t *testing.T, c *client.Client, r *result) {
	t.Helper()
	resp, err := c.ListSessions(ctxFor(t, answerWithin), &themisv1.ListSessionsRequest{All: true, PageSize: 1000})
	if err != nil {
		t.Fatalf("ListSessions after the restart: %v", err)
	}
	ss := resp.GetSessions()
	if len(ss) == 0 {
		t.Fatal("no session of the killed daemon listed after the restart")
	}
	for _, in := range ss {
		if in.GetState() != themisv1.Session_STATE_ENDED || !strings.Contains(in.GetReason(), "daemon restarted") {
			t.Errorf("session %s of the killed daemon: %s (%s), want ended: daemon restarted", in.GetId(), in.GetState(), in.GetReason())
		}
	}
	r.note("its %d sessions listed %s (%s)", len(ss), strings.TrimPrefix(ss[0].GetState().String(), "STATE_"), clip(ss[0].GetReason()))
}

// findingExplore finds a finding within seconds: ext2 against vfat at
// depth 1 (vfat's modes and owners differ under the metis policy; as in
// runs/exploration's Ext2VfatDifferential).
func findingExplore() *themisv1.ExploreRequest {
	return &themisv1.ExploreRequest{Lanes: []string{"ext2", "vfat"}, Depth: 1, Branching: 10, Seed: 7, Policy: "metis", Backend: "qemu"}
}

// sigkillFindingInsert runs a themisd built with -tags themisfault that
// holds its first finding insert inside the ledger's transaction
// (session.FaultEnv=finding-insert: the findings row written, its
// finding_seen row not yet, nothing committed), SIGKILLs it there and
// restarts the production themisd on its state dir: the ledger passes
// integrity_check, the finding is absent or whole (its row and its
// finding_seen row both or neither, and ListFindings shows it whole if at
// all), the explore's sessions are ended ("daemon restarted"), no QEMU is
// left, and a new session boots and answers.
func sigkillFindingInsert(t *testing.T, s *suite, r *result) {
	bin := filepath.Join(dirs.Work, "themisd-themisfault")
	goBuild(t, "./cmd/themisd", bin, nil, append([]string{"-tags", "themisfault"}, raceFlags...)...)
	k := newKilled(t, s, "themisd-finding", bin)
	d := k.start(t, session.FaultEnv+"=finding-insert")
	c := dial(t, d.addr)
	defer c.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Explore(ctx, findingExplore())
	if err != nil {
		t.Fatal(err)
	}
	streamEnd := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				streamEnd <- err
				return
			}
		}
	}()
	id := heldInsert(t, k.log, streamEnd)
	k.kill(t, s, r, d, c, "holding finding "+id+" inside its insert", streamEnd)
	r.note("finding %s in the ledger after the kill: %s", id, findingRows(t, k.ledger, id))
	d, c2 := k.restart(t, s, r)
	defer c2.Close()
	fs, err := c2.ListFindings(ctxFor(t, answerWithin), &themisv1.ListFindingsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs.GetFindings() {
		if f.GetKind() == "" || f.GetDetail() == "" || f.GetTimesSeen() < 1 {
			t.Errorf("finding after the restart, not whole: %v", f)
		}
	}
	r.note("%d findings listed after the restart", len(fs.GetFindings()))
	k.servesNewSession(t, r, d, c2)
}

// heldInsert waits for a themisfault themisd's log to say that it holds a
// finding insert (session.FindingInsertHeld) and returns the finding's id.
func heldInsert(t *testing.T, log string, streamEnd <-chan error) string {
	t.Helper()
	for deadline := time.Now().Add(bootWithin); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		if _, after, ok := strings.Cut(string(b), session.FindingInsertHeld); ok {
			id, _, _ := strings.Cut(after, "\n")
			return id
		}
		select {
		case err := <-streamEnd:
			t.Fatalf("the explore's stream ended before a finding insert was held: %v", err)
		default:
		}
	}
	t.Fatalf("no finding insert held %v after the explore's start", bootWithin)
	return ""
}

// findingRows says whether the ledger holds finding id whole (its findings
// row and its finding_seen row, the first of its key), or not at all; it
// fails t for half of it.
func findingRows(t *testing.T, ledger, id string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+ledger+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	var rows, seen int
	ctx := ctxFor(t, 30*time.Second)
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM findings WHERE id = ?", id).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM finding_seen WHERE first_id = ?", id).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	switch {
	case rows == 0 && seen == 0:
		return "absent (the transaction never committed)"
	case rows == 1 && seen == 1:
		return "whole"
	}
	t.Errorf("finding %s half in the ledger: %d findings rows, %d finding_seen rows", id, rows, seen)
	return "HALF"
}
