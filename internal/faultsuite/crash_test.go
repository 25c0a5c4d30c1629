package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/internal/sandbox"
	"github.com/themisfs/themis/internal/scratch/scratchtest"
)

// tmpTmpfsMiB is the size of the temp dir of crash-enospc: less than the
// room an image copy must leave (scratch.Reserve, 256 MiB at least).
const tmpTmpfsMiB = 16

// crashENOSPC points the daemon's temp dir, where a crash run writes each
// crash state's image and replays its journal, at a small tmpfs and runs a
// crash check: the run stops RESOURCE_EXHAUSTED saying there is no room
// for the image copy, no crash finding is recorded (a full host disk is
// not the filesystem's crash bug), nothing is left in the tmpfs, the run's
// session ends, and the daemon and the bystander answer.
func crashENOSPC(t *testing.T, s *suite, r *result) {
	small, err := os.MkdirTemp(dirs.Work, "tmp-") // not in the counted temp dir
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(small); err != nil {
			t.Error(err)
		}
	})
	scratchtest.Mount(t, small, tmpTmpfsMiB)
	c, stop := s.ownDaemon(t, filepath.Join(dirs.Work, "crash-state"), 0) // no session budget: a checkpoint's RAM shadow is past the suite's
	defer stop()
	t.Setenv("TMPDIR", small)
	t0 := time.Now()
	stream, err := c.Crash(ctxFor(t, bootWithin), &themisv1.CrashRequest{Lanes: []string{"ext4"}, Setup: []string{"create seed 0644"},
		Trace: []string{"write seed 0 12288 0x55", "fsync seed"}, MaxStates: 4, Minimize: -1, HostReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	results, findings, err := drainCrash(stream)
	m := status.Convert(err).Message()
	if code(err) != codes.ResourceExhausted || !strings.Contains(m, "no room for the image copy") || !strings.Contains(m, small) {
		t.Errorf("the crash run with its temp dir on a %d MiB tmpfs: %v; want RESOURCE_EXHAUSTED: no room for the image copy in %s", tmpTmpfsMiB, err, small)
	}
	r.note("the crash run (its temp dir on a %d MiB tmpfs): %s after %v (%q)", tmpTmpfsMiB, code(err), time.Since(t0).Round(100*time.Millisecond), clip(m))
	if findings != 0 {
		t.Errorf("%d crash findings from a run whose host disk was full, want none", findings)
	}
	r.note("%d states checked, %d findings", results, findings)
	if ents, err := os.ReadDir(small); err != nil || len(ents) != 0 {
		t.Errorf("left in the full tmpfs: %v %v", ents, err)
	}
	resp, err := c.ListSessions(ctxFor(t, answerWithin), &themisv1.ListSessionsRequest{All: true})
	if err != nil || len(resp.GetSessions()) != 1 {
		t.Fatalf("the crash run's session: %v %v, want one", resp.GetSessions(), err)
	}
	run := resp.GetSessions()[0]
	if run.GetState() == themisv1.Session_STATE_RUNNING {
		t.Errorf("the crash run's session %s still running", run.GetId())
	}
	r.note("its session %s (%s)", strings.TrimPrefix(run.GetState().String(), "STATE_"), clip(run.GetReason()))
	s.probe(t, r)
}

// imageBuffer is crash-image-unread's limits.stream_buffer: 8 image
// chunks of 128 KiB, 1 MiB queued for the client.
const imageBuffer = 8

// imageSetup is the setup of crash-image-unread's lane (ext4:size=64): a
// file of 8 MiB of data, so that the state's image (64 chunks of 128 KiB
// with data, zeros left out) is more than the stream buffers (imageBuffer
// chunks) and gRPC's windows (unreadConn's, fixed at 64 KiB) hold.
var imageSetup = []string{"create seed 0644", "create big 0644", "write big 0 8388608 0x55"}

// crashImageUnread asks a crash run of one state (only) for that state's
// disk image on a connection of its own and never reads the stream: the
// run is cancelled once the stream's buffer has been full for
// stream_stall_s, its session ends saying the client is not reading, the
// stream, read at last, ends RESOURCE_EXHAUSTED, and the daemons and the
// bystander answer throughout; the census (after) finds the run's temp
// dir removed.
func crashImageUnread(t *testing.T, s *suite, r *result) {
	c, stop := s.ownDaemon(t, filepath.Join(dirs.Work, "crash-image-state"), imageBuffer)
	defer stop()
	conn := unreadConn(t, ownAddr())
	defer func() {
		if err := conn.Close(); err != nil {
			t.Error(err)
		}
	}()
	unread := themisv1.NewThemisClient(conn)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := unread.Crash(ctx, &themisv1.CrashRequest{Lanes: []string{"ext4:size=64"}, Setup: imageSetup,
		Trace: []string{"write seed 0 4096 0x55", "fsync seed"}, Only: &themisv1.CrashKeep{}, StreamImage: true, Minimize: -1, HostReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	run, took := waitRunEnded(t, c, nil, func() { s.probe(t, r) })
	if !strings.Contains(run.GetReason(), "client not reading") {
		t.Errorf("the crash run's session ended %s (%s), want it to say the client is not reading", run.GetState(), run.GetReason())
	}
	r.note("the run's session ended %s %v after it was listed (stream_stall_s %v): %s", strings.TrimPrefix(run.GetState().String(), "STATE_"),
		took.Round(100*time.Millisecond), streamStall, clip(run.GetReason()))
	var chunks, bytes int
	for {
		msg, err := stream.Recv()
		if err != nil {
			if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "client not reading") {
				t.Errorf("the stream ended %v, want RESOURCE_EXHAUSTED: client not reading", err)
			}
			r.note("the stream, read at last: %d image chunks (%.1f MiB), then %s", chunks, float64(bytes)/(1<<20), code(err))
			break
		}
		if img := msg.GetImage(); img != nil {
			chunks, bytes = chunks+1, bytes+len(img.GetData())
		}
	}
	s.probe(t, r)
}

// unreadConn is a connection of its own to the daemon at addr (an
// unread stream holds its connection's window) whose flow-control windows
// stay at gRPC's least, 64 KiB (a window set by hand is not grown by
// gRPC's bandwidth estimate), so that a small image fills them.
func unreadConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// drainCrash reads a crash run's stream to its end and counts its results
// and findings; err is the stream's end (nil: it ended with its summary).
func drainCrash(stream themisv1.Themis_CrashClient) (results, findings int, err error) {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return results, findings, nil
		}
		if err != nil {
			return results, findings, err
		}
		switch {
		case msg.GetResult() != nil:
			results++
		case msg.GetFinding() != nil:
			findings++
		}
	}
}

// hungFsck is the host checker of crash-fsck-timeout (hostileChecker): an
// e2fsck that never ends.
const hungFsck = "#!/bin/sh\nsleep 3600; :\n"

// fsckFaults are crash-fsck-timeout's runs, each a real crash run whose
// first check runs the hung checker: e2fsck -fn after the guest's mount,
// or with host_replay the journal replay (e2fsck -E journal_only). Past
// the sandbox's timeout (sandbox.Default.Timeout, 10 min in the daemon,
// shortened here) the sandbox kills it; kill: the case SIGKILLs it from
// the host first.
var fsckFaults = []struct {
	name       string
	hostReplay bool
	timeout    time.Duration
	kill       bool
	want       []string // in the run's error
}{
	{"past its time", false, 2 * time.Second, false, []string{"e2fsck -fn", "host tool timed out after 2s"}},
	{"killed", true, time.Minute, true, []string{"e2fsck journal replay", "host tool killed by a signal: SIGKILL"}},
}

// crashFsckTimeout runs crash checks whose host checker hangs: one past
// the sandbox's timeout, one SIGKILLed. Each run fails with an error
// naming the checker and its timeout or signal, with no state result and
// no crash finding (the checker's failure is not the filesystem's), its
// session ends, no process of the checker or its sandbox is left (the
// census's other processes), and the daemons and the bystander answer.
func crashFsckTimeout(t *testing.T, s *suite, r *result) {
	hostileChecker(t, hungFsck)
	defer func(d time.Duration) { sandbox.Default.Timeout = d }(sandbox.Default.Timeout)
	c, stop := s.ownDaemon(t, filepath.Join(dirs.Work, "crash-fsck-state"), 0) // a checkpoint's RAM shadow is past the suite's budget
	defer stop()
	for _, f := range fsckFaults {
		sandbox.Default.Timeout = f.timeout
		t0 := time.Now()
		stream, err := c.Crash(ctxFor(t, bootWithin), &themisv1.CrashRequest{Lanes: []string{"ext4"}, Setup: []string{"create seed 0644"},
			Trace: []string{"write seed 0 12288 0x55", "fsync seed"}, MaxStates: 2, Minimize: -1, HostReplay: f.hostReplay})
		if err != nil {
			t.Fatal(err)
		}
		if f.kill {
			go s.killWhenSeen(t, "e2fsck", r)
		}
		results, findings, err := drainCrash(stream)
		m := status.Convert(err).Message()
		if err == nil || results+findings != 0 || !containsAll(m, f.want) {
			t.Errorf("a crash run whose checker is %s: %d results, %d findings, %v; want none and an error saying %q", f.name, results, findings, err, f.want)
		}
		r.note("checker %s: the run %s after %v (%q), %d results, %d findings", f.name, code(err), time.Since(t0).Round(100*time.Millisecond), tail(m), results, findings)
		if left := s.settle(t, func(c Census) bool { return len(c.Others) == len(s.base.Others) }); len(left.Others) != len(s.base.Others) {
			t.Errorf("the checker's processes left: %v", left.Others)
		}
	}
	fs, err := c.ListFindings(ctxFor(t, answerWithin), &themisv1.ListFindingsRequest{})
	if err != nil || len(fs.GetFindings()) != 0 {
		t.Errorf("findings recorded: %v %v, want none", fs.GetFindings(), err)
	}
	runsEnded(t, c, r)
	s.probe(t, r)
}

// runsEnded fails t for a session of the daemon behind c still running
// and notes how the last one ended.
func runsEnded(t *testing.T, c *client.Client, r *result) {
	t.Helper()
	ss := listSessions(t, c, true)
	for _, in := range ss {
		if in.GetState() == themisv1.Session_STATE_RUNNING {
			t.Errorf("the crash run's session %s still running", in.GetId())
		}
	}
	if len(ss) > 0 {
		r.note("its session %s (%s)", strings.TrimPrefix(ss[0].GetState().String(), "STATE_"), tail(ss[0].GetReason()))
	}
}

// killWhenSeen SIGKILLs the first process of the daemon named comm once
// the census sees it (within bootWithin).
func (s *suite) killWhenSeen(t *testing.T, comm string, r *result) {
	for deadline := time.Now().Add(bootWithin); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := s.scope.Take()
		if err != nil {
			t.Error(err)
			return
		}
		for _, p := range c.Others {
			pid, name, _ := strings.Cut(p, " ")
			if name != comm {
				continue
			}
			n, _ := strconv.Atoi(pid) // the census's own "pid comm"
			if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
				t.Errorf("SIGKILL %s: %v", p, err)
			}
			r.note("SIGKILLed %s", p)
			return
		}
	}
	t.Errorf("no %s process of the daemon seen in %v", comm, bootWithin)
}

// tail is the end of an error message, where its cause is.
func tail(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// containsAll says whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// heldFsck is the host checker of crash-replay-enospc (hostileChecker): an
// e2fsck that waits, in the sandbox, until the case sends it SIGUSR1 (sh, pid 1 of the sandbox's pid namespace, gets
// the signals it traps), then runs the real e2fsck in its place.
const heldFsck = "#!/bin/sh\ntrap 'exec /usr/sbin/e2fsck \"$@\"' USR1\nwhile :; do sleep 0.05; done\n"

// replayTmpfsMiB is the temp dir of crash-replay-enospc: room for an image
// copy and the reserve it leaves (scratch.Reserve, 256 MiB).
const replayTmpfsMiB = 320

// replayTrace makes crash states whose journal replay writes a block that
// is a hole in the state's image copy (one of the top-level directories
// goes to block group 2, untouched until then: the copy's zero chunks are
// holes), so that on a full file system the replay's write fails.
var replayTrace = []string{"mkdir a", "mkdir b", "mkdir c", "mkdir d", "create a/f 0644", "create b/f 0644", "sync"}

// crashReplayENOSPC runs a crash check (host replay) with its temp dir on
// a tmpfs that the case fills while each state's journal replay runs and
// empties before the state's fsck (conduct): each image copy succeeds,
// then a replay's write fails with ENOSPC. The run must fail
// RESOURCE_EXHAUSTED naming ENOSPC, with no crash finding (the host's
// full disk is not the filesystem's crash bug), its session ended,
// nothing left in the tmpfs, and the daemons and the bystander answering.
func crashReplayENOSPC(t *testing.T, s *suite, r *result) {
	small, err := os.MkdirTemp(dirs.Work, "tmp-") // not in the counted temp dir
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(small); err != nil {
			t.Error(err)
		}
	})
	scratchtest.Mount(t, small, replayTmpfsMiB)
	hostileChecker(t, heldFsck)
	c, stop := s.ownDaemon(t, filepath.Join(dirs.Work, "crash-replay-state"), 0)
	defer stop()
	t.Setenv("TMPDIR", small)
	done, conducted := make(chan struct{}), make(chan int)
	go func() { conducted <- s.conduct(t, small, done) }()
	t0 := time.Now()
	stream, err := c.Crash(ctxFor(t, bootWithin), &themisv1.CrashRequest{Lanes: []string{"ext4:size=64"}, Setup: []string{"create seed 0644"},
		Trace: replayTrace, CrashWrites: -1, MaxStates: 64, Minimize: -1, HostReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	results, findings, err := drainCrash(stream)
	close(done)
	m := status.Convert(err).Message()
	if code(err) != codes.ResourceExhausted || findings != 0 || !containsAll(m, []string{"journal replay", "ENOSPC", small}) {
		t.Errorf("a crash run whose journal replay hit ENOSPC: %d results, %d findings, %v; want RESOURCE_EXHAUSTED naming the replay, ENOSPC and %s, no finding", results, findings, err, small)
	}
	r.note("%d checks run with the tmpfs full for the replay; the run %s after %v (%q), %d states checked, %d findings", <-conducted, code(err),
		time.Since(t0).Round(100*time.Millisecond), tail(m), results, findings)
	if fs, err := c.ListFindings(ctxFor(t, answerWithin), &themisv1.ListFindingsRequest{}); err != nil || len(fs.GetFindings()) != 0 {
		t.Errorf("findings recorded: %v %v, want none", fs.GetFindings(), err)
	}
	if ents, err := os.ReadDir(small); err != nil || len(ents) != 0 {
		t.Errorf("left in the tmpfs: %v %v", ents, err)
	}
	runsEnded(t, c, r)
	s.probe(t, r)
}

// hostileChecker puts script first on the daemon's PATH as e2fsck, for
// the case (the sandbox binds a tool from outside /usr at /tool/e2fsck).
func hostileChecker(t *testing.T, script string) {
	t.Helper()
	bin := filepath.Join(dirs.Work, "hostile-fsck")
	if err := os.MkdirAll(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "e2fsck"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// conduct lets each held checker (heldFsck) of crash-replay-enospc go, a
// journal replay with the tmpfs at small filled, a fsck with it emptied,
// until done; it then empties the tmpfs and returns how many replays it
// let go on a full tmpfs.
func (s *suite) conduct(t *testing.T, small string, done <-chan struct{}) (full int) {
	let := map[int]bool{}
	var filler string
	for {
		select {
		case <-done:
			if filler != "" {
				if err := os.Remove(filler); err != nil {
					t.Error(err)
				}
			}
			return full
		case <-time.After(20 * time.Millisecond):
		}
		pid, replay := s.heldChecker(t, let)
		switch {
		case pid == 0:
			continue
		case replay && filler == "":
			filler = fill(t, small)
		case !replay && filler != "":
			if err := os.Remove(filler); err != nil {
				t.Error(err)
			}
			filler = ""
		}
		if replay {
			full++
		}
		release(pid)
		let[pid] = true
	}
}

// heldChecker finds a heldFsck process of the daemon not yet let go, and
// says whether it is a journal replay; 0 when there is none.
func (s *suite) heldChecker(t *testing.T, let map[int]bool) (pid int, replay bool) {
	c, err := s.scope.Take()
	if err != nil {
		t.Error(err)
		return 0, false
	}
	for _, p := range c.Others {
		pidS, name, _ := strings.Cut(p, " ")
		pid, _ := strconv.Atoi(pidS) // the census's own "pid comm"
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if name == "e2fsck" && !let[pid] && err == nil && strings.Contains(string(cmd), "/tool/e2fsck") {
			return pid, strings.Contains(string(cmd), "journal_only")
		}
	}
	return 0, false
}

// release sends a held checker SIGUSR1 until it runs the real e2fsck (a
// signal before its trap is set is ignored: it is its namespace's pid 1).
func release(pid int) {
	for range 250 {
		if syscall.Kill(pid, syscall.SIGUSR1) != nil {
			return // gone
		}
		time.Sleep(20 * time.Millisecond)
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(b), "/tool/e2fsck") {
			return
		}
	}
}
