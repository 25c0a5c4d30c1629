package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/errkind"
)

// bootWait bounds how long Close waits for booting Creates to unwind after
// their boots were cancelled.
const bootWait = 30 * time.Second

// boots tracks the Creates in flight, so that closing the Manager can cancel
// their boots and wait for them before the ledger closes. The zero value is
// not ready: newBoots makes one.
type boots struct {
	ctx    context.Context // ends when the Manager stops its sessions
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newBoots() *boots {
	ctx, cancel := context.WithCancel(context.Background())
	return &boots{ctx: ctx, cancel: cancel}
}

// beginCreate registers a Create: its context also ends when the Manager
// stops its sessions; done unregisters it. A closed Manager is errkind.ErrState.
func (m *Manager) beginCreate(ctx context.Context) (_ context.Context, done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, nil, fmt.Errorf("session: manager closed: %w", errkind.ErrState)
	}
	m.boots.wg.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.boots.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		m.boots.wg.Done()
	}, nil
}

// StopSessions refuses new sessions, cancels the boots of Creates in
// flight and stops every running session's guest (recording it ended,
// reason "daemon stopped"); the ledger stays open for the calls still
// unwinding. Close does it too; the daemon calls it first so that a call
// blocked on a guest returns before the ledger closes. Idempotent.
func (m *Manager) StopSessions() error {
	m.mu.Lock()
	m.closed = true
	ss := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	m.boots.cancel()
	var errs []error
	for _, s := range ss {
		// Bounded whatever the guest does: a call stuck on s is ended by
		// killing its machine.
		if err := m.shut(s, "daemon stopped", false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitCreates waits, up to bootWait, for the Creates in flight to return
// (each cleans up its own boot). It says whether they did.
func (m *Manager) waitCreates() bool {
	done := make(chan struct{})
	go func() {
		m.boots.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(bootWait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		m.log.Error("booting sessions still unwinding; closing the ledger under them", zap.Duration("waited", bootWait))
		return false
	}
}
