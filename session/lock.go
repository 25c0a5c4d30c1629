package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
)

// lock is a mutex that a caller may stop waiting for when its context
// ends (a channel of one token; the zero value is unusable: newLock).
type lock chan struct{}

func newLock() lock { return make(lock, 1) }

// Lock waits for the lock.
func (l lock) Lock() { l <- struct{}{} }

// LockCtx waits for the lock until ctx ends.
func (l lock) LockCtx(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases the lock.
func (l lock) Unlock() { <-l }

// view is an immutable copy of a session's metadata, published under the
// session's lock (session.unlock) and read without it: Get, List and
// Checkpoints never wait on a session whose guest is busy or stuck.
type view struct {
	info Info
	cps  []*Checkpoint // every checkpoint, oldest first (clones)
	run  string        // the run that leases the session, if any
}

// publish stores a copy of s's metadata as its view; after an abandon
// (the lock holder given up on) it keeps the ended view. s.mu is held.
func (s *session) publish() {
	if s.abandoned.Load() {
		return
	}
	v := &view{info: s.info, run: s.run, cps: make([]*Checkpoint, len(s.cps))}
	v.info.Lanes = append([]Lane(nil), s.info.Lanes...)
	for i, c := range s.cps {
		v.cps[i] = c.clone()
	}
	s.view.Store(v)
}

// unlock publishes s's view and releases its lock.
func (s *session) unlock() {
	s.publish()
	s.mu.Unlock()
}

// snapshot returns s's view (never nil once s is in the session map).
func (s *session) snapshot() *view { return s.view.Load() }

// ErrUnresponsive wraps the error of a guest call that ran past its
// deadline while the caller's own context had not ended: the session is
// marked StateUnresponsive. It also wraps context.DeadlineExceeded.
var ErrUnresponsive = errors.New("guest unresponsive")

// guestCall runs f on s's machine under a deadline: ctx's, capped by
// Config.CallTimeout. Past the cap (the agent silent) the session is
// marked unresponsive and the error wraps ErrUnresponsive; an answer marks
// an unresponsive session running again. Other errors go through
// machineErr. A write its overlays refused (the session's budget) fails
// the session, wrapping errkind.ErrExhausted. s.mu is held and s is live.
func (m *Manager) guestCall(ctx context.Context, s *session, what string, f func(ctx context.Context, mach vmm.Machine) error) error {
	if refusal := s.overBudget(); refusal != nil {
		return m.budgetFailed(s, what, refusal)
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	err := f(cctx, s.mach)
	if refusal := s.overBudget(); refusal != nil {
		return m.budgetFailed(s, what, refusal)
	}
	switch {
	case err == nil:
		if s.info.State == StateUnresponsive {
			s.info.State, s.info.Reason = StateRunning, ""
			m.event(ctx, Event{Session: s.info.ID, Kind: "session.responsive", Detail: what + " answered"})
		}
		return nil
	case ctx.Err() == nil && cctx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
		reason := fmt.Sprintf("%s: no answer within %s", what, m.cfg.CallTimeout)
		if s.info.State == StateRunning {
			s.info.State, s.info.Reason = StateUnresponsive, reason
			m.event(ctx, Event{Session: s.info.ID, Kind: "session.unresponsive", Detail: reason})
		}
		return fmt.Errorf("session %s is unresponsive: %s: %w: %w", s.info.ID, reason, ErrUnresponsive, err)
	}
	return m.machineErr(s, what, err)
}

// Bounds of a session's end while its lock is held by a stuck call.
const (
	// endGrace is how long shut waits for the lock before it kills the
	// machine, and again after.
	endGrace = time.Second
)

// killer is a machine that can be killed at once, without waiting for the
// calls in flight (qemu.Machine's Kill): they fail.
type killer interface{ Kill() error }

// shut ends s with reason, bounded: it waits up to endGrace for the lock
// (a call in flight may finish); then kills the machine (its calls in
// flight fail, and the holder's stop ends s with reason) and waits up to
// endGrace again; a holder that still does not let go is given up on
// (abandon). An unresponsive session's machine is killed before it is
// closed. With noRun, a session leased by a run is refused (errkind.ErrState)
// and left alone.
func (m *Manager) shut(s *session, reason string, noRun bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), endGrace)
	err := s.mu.LockCtx(ctx)
	cancel()
	if err != nil {
		if noRun && s.snapshot().run != "" {
			return busyErr(s.info.ID, s.snapshot().run)
		}
		s.ending.Store(&reason)
		m.kill(s)
		ctx, cancel := context.WithTimeout(context.Background(), endGrace)
		err = s.mu.LockCtx(ctx)
		cancel()
		if err != nil {
			return m.abandon(s, reason)
		}
	}
	defer s.unlock()
	if noRun && s.run != "" && s.info.State.live() {
		return busyErr(s.info.ID, s.run)
	}
	if s.info.State == StateUnresponsive {
		m.kill(s) // a graceful quit would only wait out its own timeouts
	}
	return m.stop(s, StateEnded, reason)
}

// busyErr is the errkind.ErrState of a session leased by a run.
func busyErr(id, run string) error {
	return fmt.Errorf("session %q is busy with %s run (cancel the run to end it): %w", id, article(run), errkind.ErrState)
}

// kill kills s's machine without its lock: Kill where the machine has it,
// else Close (which may itself wait for the call in flight) on its own
// goroutine.
func (m *Manager) kill(s *session) {
	log := m.log.With(zap.String("session", s.info.ID))
	if k, ok := s.booted.(killer); ok {
		if err := k.Kill(); err != nil {
			log.Warn("kill machine", zap.Error(err))
		}
		return
	}
	go func() {
		if err := s.booted.Close(); err != nil {
			log.Warn("close machine", zap.Error(err))
		}
	}()
}

// abandon ends s without its lock, whose holder is stuck in a machine
// that was killed and still does not return: it releases the session's
// capacity, records its end and publishes an ended view; the holder closes
// the machine and its disks whenever it returns (stop).
func (m *Manager) abandon(s *session, reason string) error {
	if !s.ended.CompareAndSwap(false, true) {
		return nil
	}
	at := time.Now().UTC()
	v := *s.snapshot()
	v.info.State, v.info.Ended, v.info.Reason, v.info.Depth = StateEnded, at, reason, 0
	s.view.Store(&v)
	s.abandoned.Store(true)
	m.release(s)
	m.log.Warn("session ended without its lock: a call on its killed machine has not returned",
		zap.String("session", s.info.ID), zap.String("reason", reason))
	return m.end(context.Background(), s.info.ID, StateEnded, at, reason)
}

// release removes s from the session map and frees its capacity.
func (m *Manager) release(s *session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[s.info.ID] == s {
		delete(m.sessions, s.info.ID)
		m.memory -= s.info.MemoryMiB
	}
}
