package faultsuite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/internal/scratch/scratchtest"
	"github.com/themisfs/themis/server"
	"github.com/themisfs/themis/session"
)

// stateTmpfsMiB is the size of the tmpfs the state dir of statedir-enospc
// is on: room for a fresh ledger and its WAL, then filled.
const stateTmpfsMiB = 8

// fill writes a file in dir until its file system is full and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return p
		}
	}
}

// statedirENOSPC runs a daemon of its own (in this process, over the
// fault image) whose state dir, the ledger and its WAL, is on a tmpfs of
// stateTmpfsMiB, boots a session, and fills the tmpfs: a Fork, whose
// checkpoint must be recorded, fails RESOURCE_EXHAUSTED naming the ledger
// and ENOSPC and leaves no checkpoint; an op still answers (its event is
// logged as lost); a CreateSession, whose record cannot be written, fails
// the same way and its guest is stopped; both daemons and the bystander
// answer. With the space freed, the ledger passes integrity_check and
// writes work again: a Fork (c-1) and the session's Delete, recorded.
func statedirENOSPC(t *testing.T, s *suite, r *result) {
	state, err := os.MkdirTemp(dirs.Work, "state-")
	if err != nil {
		t.Fatal(err)
	}
	scratchtest.Mount(t, state, stateTmpfsMiB)
	ledger := filepath.Join(state, "ledger.db")
	c, stop := s.ownDaemon(t, state, 0)
	defer stop()
	resp, err := c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	filler := fill(t, state)

	full := func(what string, err error) {
		t.Helper()
		msg := status.Convert(err).Message()
		if code(err) != codes.ResourceExhausted || !strings.Contains(msg, ledger) || !strings.Contains(msg, "ENOSPC") {
			t.Errorf("%s on a full state dir: %v; want RESOURCE_EXHAUSTED naming %s and ENOSPC", what, err, ledger)
		}
		r.note("%s: %s (%q)", what, code(err), clip(msg))
	}
	_, err = c.Fork(ctxFor(t, callTimeout), &themisv1.ForkRequest{SessionId: id})
	full("Fork", err)
	if cps, err := c.ListCheckpoints(ctxFor(t, answerWithin), &themisv1.ListCheckpointsRequest{SessionId: id, All: true}); err != nil || len(cps.GetCheckpoints()) != 0 {
		t.Errorf("checkpoints after the failed Fork: %v %v, want none", cps.GetCheckpoints(), err)
	}
	if _, err := c.Apply(ctxFor(t, callTimeout), &themisv1.ApplyRequest{SessionId: id, Op: &themisv1.Op{Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d", Mode: 0o755}}}}); err != nil {
		t.Errorf("Apply on a full state dir: %v, want it answered", err)
	}
	_, err = c.CreateSession(ctxFor(t, bootWithin), &themisv1.CreateSessionRequest{Lanes: []string{laneSpec}, Backend: "qemu"})
	full("CreateSession", err)
	within(t, answerWithin, "Health of the full daemon", func(ctx context.Context) error {
		_, err := c.Health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	s.probe(t, r)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	ledgerIntegrity(t, ledger)
	cp, err := c.Fork(ctxFor(t, callTimeout), &themisv1.ForkRequest{SessionId: id})
	if err != nil || cp.GetCheckpoint().GetId() != "c-1" {
		t.Errorf("Fork with room again: %v %v, want c-1", cp.GetCheckpoint(), err)
	}
	r.note("space freed: the ledger's integrity_check ok, a Fork (c-1) and the session deleted in %v", deleteOn(t, c, id).Round(time.Millisecond))
	got, err := c.GetSession(ctxFor(t, answerWithin), &themisv1.GetSessionRequest{SessionId: id})
	if err != nil || got.GetSession().GetState() != themisv1.Session_STATE_ENDED {
		t.Errorf("the session after its Delete: %v %v, want ended", got.GetSession(), err)
	}
}

// deleteOn deletes session id on the daemon behind c and returns how long
// it took.
func deleteOn(t *testing.T, c *client.Client, id string) time.Duration {
	t.Helper()
	return within(t, 10*time.Second, "DeleteSession "+id, func(ctx context.Context) error {
		_, err := c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: id})
		return err
	})
}

// warmLedger opens the ledger connections of the daemon behind c that
// its reads take while a run writes (two idle ones kept, as database/sql
// does), so that the first reads of a case do not pay for opening them
// (seconds under -race on a loaded machine).
func warmLedger(t *testing.T, c *client.Client) {
	t.Helper()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := c.ListSessions(ctxFor(t, 30*time.Second), &themisv1.ListSessionsRequest{All: true}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// ownAddr is the address of a case's own daemon (ownDaemon).
func ownAddr() string { return "unix://" + filepath.Join(dirs.Work, "own.sock") }

// ownDaemon starts a daemon of the case's own in this process, over the
// fault image, on state, without the suite daemon's budgets (its stream
// stall is the suite's; streamBuffer, 0 for the default, its
// limits.stream_buffer), and dials it at ownAddr; stop closes the client
// and shuts the daemon down.
func (s *suite) ownDaemon(t *testing.T, state string, streamBuffer int) (c *client.Client, stop func()) {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	mgr, err := session.Open(context.Background(), session.Config{StateDir: state, CacheDir: s.env.CacheDir,
		MakeBase: baseimage.Make, Image: s.img, CallTimeout: callTimeout, MaxSessions: 2, Log: log.Named("session")})
	if err != nil {
		t.Fatal(err)
	}
	d, err := server.StartDaemonWith(context.Background(), server.Config{
		Listen: ownAddr(), StateDir: state, Limits: server.Limits{StreamStallS: int(streamStall / time.Second), StreamBuffer: streamBuffer},
	}, server.NewDomain(mgr), log)
	if err != nil {
		t.Fatal(err)
	}
	c = dial(t, d.Addr())
	warmLedger(t, c)
	return c, func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if err := d.Shutdown(ctxFor(t, time.Minute)); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}
}
