package faultsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/vmm/qemu"
)

// drain is the themisd process's --drain: how long its in-flight calls may
// finish after SIGTERM before they are cancelled.
const drain = 2 * time.Second

// exitWithin bounds a themisd's exit after SIGTERM: the drain, then the
// daemon's own bounded waits (10 s for cut-off calls, 10 s more once the
// guests are stopped).
const exitWithin = drain + 25*time.Second

// themisd is a themisd process of the suite's.
type themisd struct {
	cmd    *exec.Cmd
	addr   string
	log    string
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// startThemisd starts themisd on config (with --drain) and waits until it
// answers; its stderr goes to log; env is added to its environment. At the
// test's end a themisd still running is killed.
func startThemisd(t *testing.T, bin, config, sock, log string, env ...string) *themisd {
	t.Helper()
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	d := &themisd{cmd: exec.Command(bin, "--config", config, "--drain", drain.String()), addr: "unix://" + sock, log: log, exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = out, out
	d.cmd.Env = append(os.Environ(), env...)
	if os.Getenv("GORACE") == "" {
		// A -race build (raceFlags) sleeps a second at exit by default.
		d.cmd.Env = append(d.cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		if err := out.Close(); err != nil && d.err == nil {
			d.err = err
		}
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			t.Errorf("themisd %d still running at the end; killed", d.cmd.Process.Pid)
			if err := d.cmd.Process.Kill(); err != nil {
				t.Error(err)
			}
			<-d.exited
		}
		if t.Failed() {
			d.dumpLog(t)
		}
	})
	for deadline := time.Now().Add(bootWithin); ; time.Sleep(200 * time.Millisecond) {
		c, err := client.Dial(ctxFor(t, time.Second), d.addr, client.Options{})
		if err == nil {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			return d
		}
		select {
		case <-d.exited:
			d.dumpLog(t)
			t.Fatalf("themisd exited at start: %v", d.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("themisd not answering %v after its start: %v", bootWithin, err)
		}
	}
}

// stop sends SIGTERM and waits for the exit: it fails t unless themisd
// exits 0 within exitWithin, and returns how long it took.
func (d *themisd) stop(t *testing.T) time.Duration {
	t.Helper()
	t0 := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM themisd: %v", err)
	}
	select {
	case <-d.exited:
	case <-time.After(exitWithin):
		t.Fatalf("themisd still running %v after SIGTERM", exitWithin)
	}
	if d.err != nil {
		t.Errorf("themisd after SIGTERM: %v, want exit 0", d.err)
	}
	return time.Since(t0)
}

// dumpLog logs the tail of the daemon's log.
func (d *themisd) dumpLog(t *testing.T) {
	b, err := os.ReadFile(d.log)
	if err != nil {
		t.Errorf("themisd log: %v", err)
		return
	}
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	t.Logf("themisd log (%s), tail:\n%s", d.log, b)
}

// themisdConfig writes a config for a themisd of the suite's in dir.
func themisdConfig(t *testing.T, dir, cache string) (config, sock string) {
	t.Helper()
	sock = filepath.Join(dir, "themisd.sock")
	config = filepath.Join(dir, "themisd.toml")
	toml := fmt.Sprintf("listen = %q\nstate_dir = %q\ncache_dir = %q\n\n[limits]\nmax_sessions = 2\ncall_timeout_s = %d\nstream_stall_s = %d\n",
		"unix://"+sock, filepath.Join(dir, "state"), cache, int(callTimeout/time.Second), int(streamStall/time.Second))
	if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	return config, sock
}

// sigtermThemisd runs a real themisd (the production guest image), starts
// an explore on it and sends SIGTERM mid-explore: it must exit 0 within a
// bound, leaving no QEMU, RAM file, work dir or temp entry and removing
// its socket. Leftovers of a dead daemon are then planted, and a themisd
// restarted on the same state dir must sweep them, list the explore's
// session as ended, and boot and serve a new session; SIGTERM ends it too.
func sigtermThemisd(t *testing.T, s *suite, r *result) {
	dir := filepath.Join(dirs.Work, "themisd-process")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	config, sock := themisdConfig(t, dir, s.env.CacheDir)
	log := filepath.Join(dir, "themisd.log")
	d := startThemisd(t, s.themisd, config, sock, log)
	c := dial(t, d.addr)
	defer c.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{laneSpec}, Depth: 4, Backend: "qemu"})
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
	run := waitRunning(t, c)
	time.Sleep(2 * time.Second) // into the search
	r.note("SIGTERM %v into the explore: themisd exited 0 in %v (--drain %v)", time.Since(run.GetCreateTime().AsTime()).Round(100*time.Millisecond),
		d.stop(t).Round(10*time.Millisecond), drain)
	select {
	case err := <-streamEnd:
		r.note("the explore's stream ended %s", code(err))
	case <-time.After(10 * time.Second):
		t.Error("the explore's stream still open 10s after themisd exited")
	}
	if got := s.settle(t, func(c Census) bool { return c.Diff(s.base) == "" }); got.Diff(s.base) != "" {
		t.Errorf("after themisd exited: %s", got.Diff(s.base))
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after the exit: %v, want it removed", err)
	}

	planted := plantLeftovers(t)
	d = startThemisd(t, s.themisd, config, sock, log)
	c2 := dial(t, d.addr)
	defer c2.Close()
	for _, p := range planted {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("planted leftover %s after the restart: %v, want it swept", p, err)
		}
	}
	old, err := c2.GetSession(ctxFor(t, answerWithin), &themisv1.GetSessionRequest{SessionId: run.GetId()})
	if err != nil {
		t.Fatalf("the explore's session after the restart: %v", err)
	}
	if st := old.GetSession().GetState(); st == themisv1.Session_STATE_RUNNING || st == themisv1.Session_STATE_UNRESPONSIVE {
		t.Errorf("the explore's session after the restart: %s, want ended", st)
	}
	r.note("restart: %d planted leftovers swept; the explore's session %s (%s)", len(planted),
		strings.TrimPrefix(old.GetSession().GetState().String(), "STATE_"), clip(old.GetSession().GetReason()))
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
	r.note("a new session booted and answered; SIGTERM to the idle daemon: exit 0 in %v", d.stop(t).Round(time.Millisecond))
}

// waitRunning waits for the daemon behind c to list a running session.
func waitRunning(t *testing.T, c *client.Client) *themisv1.Session {
	t.Helper()
	for deadline := time.Now().Add(bootWithin); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := c.ListSessions(ctxFor(t, answerWithin), &themisv1.ListSessionsRequest{})
		if err != nil {
			t.Fatalf("ListSessions: %v", err)
		}
		if ss := resp.GetSessions(); len(ss) > 0 {
			return ss[0]
		}
	}
	t.Fatalf("no running session %v after the explore's start", bootWithin)
	return nil
}

// plantLeftovers leaves what a daemon killed mid-boot would: a RAM file
// and an owned work dir in the scratch dir and a work dir in the temp dir,
// none locked, all older than the sweep's grace (5 min). It returns their
// paths.
func plantLeftovers(t *testing.T) []string {
	t.Helper()
	old := time.Now().Add(-10 * time.Minute)
	var out []string
	ram := filepath.Join(dirs.Scratch, qemu.RAMFilePrefix+"faultsuite-left")
	if err := os.WriteFile(ram, bytes.Repeat([]byte{0}, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	out = append(out, ram)
	for _, parent := range []string{dirs.Scratch, dirs.Temp} {
		d := filepath.Join(parent, qemu.WorkDirPrefix+"faultsuite-left")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, scratch.OwnerFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	for _, p := range out {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
