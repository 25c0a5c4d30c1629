package server_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/server"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEndToEnd drives a real daemon on a real unix socket with a real guest:
// create → fork → apply → fingerprint differs → restore → fingerprint equal →
// delete → no QEMU left.
func TestEndToEnd(t *testing.T) {
	env := vmmtest.Setup(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startDaemon(ctx, t, dir, env.CacheDir)
	defer c.Close()
	check := vmmtest.Leaks(t)

	created, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: []string{"ext2", "ext4"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	roots := func() [][]byte {
		t.Helper()
		fp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: id, TimeMode: agentv1.TimeMode_TIME_MODE_NONE})
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for _, l := range fp.GetLanes() {
			out = append(out, l.GetRoot())
		}
		if len(out) != 2 {
			t.Fatalf("fingerprint of %d lanes, want 2", len(out))
		}
		return out
	}
	before := roots()
	fork, err := c.Fork(ctx, &themisv1.ForkRequest{SessionId: id, Name: "start"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"mkdir d-00 0755", "create d-00/f-00 0644", "write d-00/f-00 0 4096 0x55", "link d-00/f-00 f-01"} {
		op, err := opspec.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: id, Op: op})
		if err != nil {
			t.Fatalf("apply %q: %v", s, err)
		}
		for _, r := range resp.GetResults() {
			if r.GetErrno() != 0 {
				t.Fatalf("apply %q on %s: errno %d %s", s, r.GetLane(), r.GetErrno(), r.GetError())
			}
		}
	}
	// An errno path: rmdir of a non-empty directory fails the same way on both lanes.
	op, _ := opspec.Parse("rmdir d-00")
	resp, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: id, Op: op})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDiverged() || resp.GetResults()[0].GetErrno() != 39 /* ENOTEMPTY */ {
		t.Errorf("rmdir non-empty: %v", resp)
	}
	after := roots()
	for i := range after {
		if bytes.Equal(after[i], before[i]) {
			t.Errorf("lane %d: fingerprint unchanged by the ops", i)
		}
	}
	if _, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: id, Checkpoint: "start"}); err != nil {
		t.Fatal(err)
	}
	for i, r := range roots() {
		if !bytes.Equal(r, before[i]) {
			t.Errorf("lane %d: fingerprint after restore %x, want %x", i, r, before[i])
		}
	}
	cps, err := c.ListCheckpoints(ctx, &themisv1.ListCheckpointsRequest{SessionId: id})
	if err != nil || len(cps.GetCheckpoints()) != 1 || cps.GetCheckpoints()[0].GetId() != fork.GetCheckpoint().GetId() {
		t.Errorf("checkpoints after restore: %v, %v", cps, err)
	}
	if _, err := c.DeleteSession(ctx, &themisv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	check() // no QEMU left, no fds
	got, err := c.GetSession(ctx, &themisv1.GetSessionRequest{SessionId: id})
	if err != nil || got.GetSession().GetState() != themisv1.Session_STATE_ENDED {
		t.Errorf("deleted session: %v, %v", got, err)
	}
	if _, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: id, Op: op}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("apply on an ended session: %v, want FailedPrecondition", err)
	}
}

// TestBackendRejected checks, on a real session manager and no guest, that
// Explore and ClockSweep pass their backend to the session they create: a
// bad one is InvalidArgument naming the field, before anything boots.
func TestBackendRejected(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startDaemon(ctx, t, dir, filepath.Join(dir, "cache"))
	defer c.Close()
	lanes := []string{"ext2"}
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"CreateSession", func() error {
			_, err := c.CreateSession(ctx, &themisv1.CreateSessionRequest{Lanes: lanes, Backend: "xen"})
			return err
		}},
		{"Explore", func() error {
			s, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: lanes, Backend: "xen"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}},
		{"ClockSweep", func() error {
			s, err := c.ClockSweep(ctx, &themisv1.ClockSweepRequest{Lanes: lanes, Backend: "xen"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}},
	} {
		err := tt.call()
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "backend:") {
			t.Errorf("%s with backend xen: %v, want InvalidArgument naming backend", tt.name, err)
		}
	}
}

// BenchmarkApplyFingerprint compares one small Apply + Fingerprint through
// gRPC on the unix socket with the same calls on the Go API, side by side
// on one guest.
func BenchmarkApplyFingerprint(b *testing.B) {
	env := vmmtest.Setup(b)
	dir := b.TempDir()
	ctx := context.Background()
	m, err := session.Open(ctx, session.Config{MakeBase: baseimage.Make, StateDir: filepath.Join(dir, "state"), CacheDir: env.CacheDir})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "themisd.sock")
	d, err := server.StartDaemonWith(ctx, server.Config{Listen: "unix://" + sock}, server.NewDomain(m), nil)
	if err != nil {
		b.Fatal(errors.Join(err, m.Close()))
	}
	defer d.Shutdown(ctx) //nolint:errcheck
	c, err := client.Dial(ctx, d.Addr(), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	info, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		b.Fatal(err)
	}
	mk, _ := opspec.Parse("create f 0644")
	mkReq, _ := opspec.Request(mk)
	if _, err := m.Apply(ctx, info.ID, mkReq); err != nil {
		b.Fatal(err)
	}
	op, _ := opspec.Parse("chmod f 0644")
	req, _ := opspec.Request(op)
	// Interleave the two paths so machine noise hits both alike.
	var goAPI, grpcAPI time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := m.Apply(ctx, info.ID, req); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Fingerprint(ctx, info.ID, agentv1.TimeMode_TIME_MODE_NONE, false, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: info.ID, Op: op}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: info.ID}); err != nil {
			b.Fatal(err)
		}
		goAPI += t1.Sub(t0)
		grpcAPI += time.Since(t1)
	}
	b.ReportMetric(float64(goAPI.Microseconds())/float64(b.N)/1e3, "ms-go-api")
	b.ReportMetric(float64(grpcAPI.Microseconds())/float64(b.N)/1e3, "ms-grpc")
	b.ReportMetric(100*(float64(grpcAPI)/float64(goAPI)-1), "%-overhead")
}

// startDaemon starts a daemon on a unix socket in dir (stopped at the
// test's end) and dials it.
func startDaemon(ctx context.Context, t *testing.T, dir, cacheDir string) *client.Client {
	t.Helper()
	d, err := server.StartDaemon(ctx, server.Config{
		Listen:   "unix://" + filepath.Join(dir, "themisd.sock"),
		StateDir: filepath.Join(dir, "state"),
		CacheDir: cacheDir,
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	c, err := client.Dial(ctx, d.Addr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
