package session_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// blockingStart is a machine Start that stands for a boot in progress: it
// holds a file (as QEMU's RAM file in shared memory) until its context
// ends, takes a while to tear down, removes the file and fails.
type blockingStart struct {
	held      string        // the file a boot holds while it runs
	entered   chan struct{} // closed when the boot has begun
	cancelled chan struct{} // closed when the boot saw its context end
	teardown  time.Duration
}

func newBlockingStart(t *testing.T) *blockingStart {
	return &blockingStart{held: filepath.Join(t.TempDir(), "themis-ram-test"), entered: make(chan struct{}),
		cancelled: make(chan struct{}), teardown: 200 * time.Millisecond}
}

func (b *blockingStart) start(ctx context.Context, _ vmm.Config) (vmm.Machine, error) {
	if err := os.WriteFile(b.held, nil, 0o600); err != nil {
		return nil, err
	}
	close(b.entered)
	select {
	case <-ctx.Done():
		close(b.cancelled)
	case <-time.After(10 * time.Second):
	}
	time.Sleep(b.teardown)
	if err := os.Remove(b.held); err != nil {
		return nil, err
	}
	return nil, errors.New("boot cancelled")
}

// openBlocking opens a Manager in dir whose every boot is b's.
func openBlocking(t *testing.T, dir string, b *blockingStart) *session.Manager {
	t.Helper()
	m, err := session.Open(context.Background(), session.Config{StateDir: dir, CacheDir: t.TempDir(), MakeBase: baseimage.Make,
		Image: &guest.Image{}, Start: b.start, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCloseCancelsBootingCreate: Close while a Create is still booting
// cancels the boot (its context ends though the caller's never does), waits
// for it to clean up, and records the session failed before the ledger
// closes.
func TestCloseCancelsBootingCreate(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/mke2fs"); err != nil {
		t.Skip("mke2fs not installed (e2fsprogs)")
	}
	dir := t.TempDir()
	b := newBlockingStart(t)
	m := openBlocking(t, dir, b)
	created := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), session.CreateOptions{Lanes: []string{"ext2"}})
		created <- err
	}()
	<-b.entered
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-b.cancelled:
	default:
		t.Error("Close returned and the boot's context never ended")
	}
	if _, err := os.Stat(b.held); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close returned while the boot still held %s (%v)", b.held, err)
	}
	// Create has returned inside Manager (the boot's cleanup above is done
	// and the session recorded); its goroutine's send may still wait to be
	// scheduled on a loaded machine, so it gets a moment.
	select {
	case err := <-created:
		if err == nil {
			t.Error("Create during Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Error("the booting Create did not return within 10 s of Close")
		<-created
	}

	m2, _ := sessiontest.NewManager(t, dir, session.Config{}, nil)
	all, err := m2.List(context.Background(), true)
	if err != nil || len(all) != 1 || all[0].State != session.StateFailed {
		t.Fatalf("ledger after Close: %v, %v: want the one session, failed", all, err)
	}
}
