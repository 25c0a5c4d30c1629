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
	dir := filepath.Join(dirs.Work, "themisd-killed")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	config, sock := themisdConfig(t, dir, s.env.CacheDir)
	log := filepath.Join(dir, "themisd.log")
	ledger := filepath.Join(dir, "state", "ledger.db")
	d := startThemisd(t, s.themisd, config, sock, log)
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
	run := waitRunning(t, c)
	live, err := s.scope.Take()
	if err != nil {
		t.Fatal(err)
	}
	r.note("SIGKILL at the explore's first progress message (%v after its session's creation; %d QEMU of its own): themisd gone in %v",
		time.Since(run.GetCreateTime().AsTime()).Round(100*time.Millisecond), len(live.QEMU)-len(s.base.QEMU), d.kill(t).Round(time.Millisecond))
	select {
	case err := <-streamEnd:
		r.note("the stream ended %s", code(err))
	case <-time.After(10 * time.Second):
		t.Error("the explore's stream still open 10s after themisd was killed")
	}
	t0 := time.Now()
	dead := s.settle(t, func(c Census) bool { return len(c.QEMU) == len(s.base.QEMU) })
	if len(dead.QEMU) != len(s.base.QEMU) {
		t.Errorf("QEMU of the killed themisd: %v left %v after the kill (baseline %v)", dead.QEMU, settleWithin, s.base.QEMU)
	}
	ledgerIntegrity(t, ledger)
	r.note("its QEMUs gone in %v; left: %d scratch and %d temp entries; the ledger's integrity_check ok",
		time.Since(t0).Round(10*time.Millisecond), len(dead.Scratch)-len(s.base.Scratch), len(dead.Temp)-len(s.base.Temp))

	t0 = time.Now()
	d = startThemisd(t, s.themisd, config, sock, log)
	started := time.Since(t0)
	c2 := dial(t, d.addr)
	defer c2.Close()
	got, err := s.scope.Take()
	if err != nil {
		t.Fatal(err)
	}
	got.FDs = s.base.FDs       // this process's: the case's client and log are open
	got.Others = s.base.Others // the restarted themisd is this process's child
	if diff := got.Diff(s.base); diff != "" {
		t.Errorf("after the restart (the sweep): %s", diff)
	}
	restarted(t, c2, r)
	r.note("restarted in %v (the socket left by the kill replaced, the leftovers swept)", started.Round(10*time.Millisecond))
	resp, err := c2.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	if err != nil {
		t.Fatalf("CreateSession after the restart: %v", err)
	}
	id := resp.GetSession().GetId()
	within(t, answerWithin, "Stat on the restarted daemon", func(ctx context.Context) error {
		_, err := c2.Stat(ctx, &themisv1.StatRequest{SessionId: id, Lane: resp.GetSession().GetLanes()[0].GetName()})
		return err
	})
	if _, err := c2.DeleteSession(ctxFor(t, 30*time.Second), &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Error(err)
	}
	r.note("a new session booted and answered; SIGTERM: exit 0 in %v", d.stop(t).Round(time.Millisecond))
	ledgerIntegrity(t, ledger)
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
