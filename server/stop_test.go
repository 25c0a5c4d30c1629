package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// TestDaemonShutdownCancelsBootingCreate: a CreateSession still booting
// when the daemon stops past its drain deadline is cancelled, and Shutdown
// returns only once the boot has let go of what it held and the session's
// failure is in the ledger (closed after the handler, not under it).
func TestDaemonShutdownCancelsBootingCreate(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/mke2fs"); err != nil {
		t.Skip("mke2fs not installed (e2fsprogs)")
	}
	t.Parallel()
	held := filepath.Join(t.TempDir(), "themis-ram-test")
	entered := make(chan struct{})
	start := func(ctx context.Context, _ vmm.Config) (vmm.Machine, error) {
		if err := os.WriteFile(held, nil, 0o600); err != nil {
			return nil, err
		}
		close(entered)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		time.Sleep(200 * time.Millisecond) // tearing down
		if err := os.Remove(held); err != nil {
			return nil, err
		}
		return nil, errors.New("boot cancelled")
	}
	state := t.TempDir()
	m, err := session.Open(t.Context(), session.Config{StateDir: state, CacheDir: t.TempDir(), MakeBase: baseimage.Make,
		Image: &guest.Image{}, Start: start, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, err := StartDaemonWith(t.Context(), Config{Listen: "unix://" + sock, StateDir: state}, NewDomain(m), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, d.Addr(), client.Options{})
	go func() {
		_, _ = c.CreateSession(context.Background(), &themisv1.CreateSessionRequest{Lanes: []string{"ext2"}})
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := os.Stat(held); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Shutdown returned while the boot still held %s (%v)", held, err)
	}
	m2, err := session.Open(t.Context(), session.Config{StateDir: state, MakeBase: baseimage.Make, Image: &guest.Image{}, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	all, err := m2.List(t.Context(), true)
	if err != nil || len(all) != 1 || all[0].State != session.StateFailed {
		t.Errorf("ledger after Shutdown: %v, %v: want the booting session, failed", all, err)
	}
}

// TestDaemonShutdownWaitsForHandlers: past the drain deadline the
// in-flight calls are cancelled and the sessions stopped (machines killed),
// and the domain (the ledger) is closed only once every call has returned;
// a call that returns neither on its context's end nor on its machine's is
// given up on after a bounded wait, and then the ledger is left open rather
// than closed under it.
func TestDaemonShutdownWaitsForHandlers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		freeOn     string // "": the call returns when its context ends; "stop": when its sessions stop; "never": it does not
		wantClosed int
		wantErr    string
	}{
		{"unwinds after cancel", "", 1, ""},
		{"freed by stopping sessions", "stop", 1, ""},
		{"stuck", "never", 0, "still running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeDomain{block: make(chan struct{}), entered: make(chan struct{}), unwind: 200 * time.Millisecond, freeOn: tt.freeOn}
			sock := filepath.Join(sockDir(t), "themisd.sock")
			d, err := startDaemon(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir()}, zaptest.NewLogger(t), fakeOpen(f))
			if err != nil {
				t.Fatal(err)
			}
			d.hardStop = 300 * time.Millisecond
			c := dial(t, d.Addr(), client.Options{})
			applied := make(chan struct{})
			go func() {
				defer close(applied)
				_, _ = c.Apply(context.Background(), &themisv1.ApplyRequest{SessionId: "s-1", Op: syncOp()})
			}()
			<-f.entered
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- d.Shutdown(ctx) }()
			select {
			case err := <-shut:
				if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Errorf("Shutdown: %v, want error %q", err, tt.wantErr)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Shutdown did not return within 5 s")
			}
			f.mu.Lock()
			if f.closed != tt.wantClosed || f.closedUnder {
				t.Errorf("domain closed %d times (want %d); closed under a running call: %v", f.closed, tt.wantClosed, f.closedUnder)
			}
			f.mu.Unlock()
			close(f.block) // let a stuck call go, so the test leaks nothing
			<-applied
		})
	}
}

func syncOp() *themisv1.Op { return &themisv1.Op{Op: &themisv1.Op_Sync{Sync: &agentv1.Sync{}}} }

// TestDaemonStartSweepsBaseTemporaries: a daemon's start removes the base
// cache's mkfs and seed temporaries a previous one left (older than
// baseTempAge), and keeps young ones and the base images.
func TestDaemonStartSweepsBaseTemporaries(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	bases := filepath.Join(cache, "bases")
	old := time.Now().Add(-2 * time.Hour)
	entries := []struct {
		name string
		dir  bool
		old  bool
		kept bool
	}{
		{".mkfs-123.img", false, true, false},
		{".seed-456", true, true, false},
		{".mkfs-789.img", false, false, true}, // a make in progress
		{"0123abcd.img", false, true, true},   // a base image
	}
	for _, e := range entries {
		p := filepath.Join(bases, e.name)
		if e.dir {
			if err := os.MkdirAll(filepath.Join(p, "root"), 0o700); err != nil {
				t.Fatal(err)
			}
		} else if err := os.MkdirAll(bases, 0o700); err != nil {
			t.Fatal(err)
		} else if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if e.old {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, err := StartDaemon(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir(), CacheDir: cache}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(t.Context()); err != nil {
		t.Error(err)
	}
	for _, e := range entries {
		_, err := os.Lstat(filepath.Join(bases, e.name))
		if kept := err == nil; kept != e.kept {
			t.Errorf("%s: kept %v (%v), want %v", e.name, kept, err, e.kept)
		}
	}
}
