package faultsuite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
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
	c, stop := s.ownDaemon(t, filepath.Join(dirs.Work, "crash-state")) // no session budget: a checkpoint's RAM shadow is past the suite's
	defer stop()
	t.Setenv("TMPDIR", small)
	t0 := time.Now()
	stream, err := c.Crash(ctxFor(t, bootWithin), &themisv1.CrashRequest{Lanes: []string{"ext4"}, Setup: []string{"create seed 0644"},
		Trace: []string{"write seed 0 12288 0x55", "fsync seed"}, MaxStates: 4, Minimize: -1, HostReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	var results, findings int
	for {
		msg, err := stream.Recv()
		if err != nil {
			m := status.Convert(err).Message()
			if code(err) != codes.ResourceExhausted || !strings.Contains(m, "no room for the image copy") || !strings.Contains(m, small) {
				t.Errorf("the crash run with its temp dir on a %d MiB tmpfs: %v; want RESOURCE_EXHAUSTED: no room for the image copy in %s", tmpTmpfsMiB, err, small)
			}
			r.note("the crash run (its temp dir on a %d MiB tmpfs): %s after %v (%q)", tmpTmpfsMiB, code(err), time.Since(t0).Round(100*time.Millisecond), clip(m))
			break
		}
		switch {
		case msg.GetResult() != nil:
			results++
		case msg.GetFinding() != nil:
			findings++
		}
	}
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

// imageSetup is the setup of crash-image-unread's lane (ext4:size=96): a
// file of 64 MiB of data, so that the state's image is more than a stream
// buffers (server.DefaultStreamBuffer chunks of 128 KiB: 32 MiB) and
// gRPC's flow-control windows hold (up to 16 MiB).
var imageSetup = []string{"create seed 0644", "create big 0644", "write big 0 67108864 0x55"}

// crashImageUnread asks a crash run of one state (only) for that state's
// disk image on a connection of its own and never reads the stream: the
// run is cancelled once the stream's buffer has been full for
// stream_stall_s, its session ends saying the client is not reading, the
// stream, read at last, ends RESOURCE_EXHAUSTED, and the daemons and the
// bystander answer throughout; the census (after) finds the run's temp
// dir removed.
func crashImageUnread(t *testing.T, s *suite, r *result) {
	c, stop := s.ownDaemon(t, filepath.Join(dirs.Work, "crash-image-state")) // a 64 MiB lane is past the suite's session budget
	defer stop()
	unread := dial(t, ownAddr()) // its own: an unread stream holds its connection's window
	defer unread.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := unread.Crash(ctx, &themisv1.CrashRequest{Lanes: []string{"ext4:size=96"}, Setup: imageSetup,
		Trace: []string{"write seed 0 4096 0x55", "fsync seed"}, Only: &themisv1.CrashKeep{}, Image: true, Minimize: -1, HostReplay: true})
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
