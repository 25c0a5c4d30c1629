package faultsuite

import (
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
