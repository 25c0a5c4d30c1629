package sessiontest

import (
	"context"
	"fmt"
	"sync"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/vmm"
)

// HangMode is how a stopped Hang's calls block.
type HangMode int

// Hang modes.
const (
	// UntilDeadline: a call blocks until its context ends or the machine
	// is killed, as a call to a SIGSTOPped QEMU does (the agent client
	// honours the deadline; SIGKILL breaks the channel).
	UntilDeadline HangMode = iota
	// UntilKill: a call ignores its context and blocks until the machine
	// is killed (a backend wait that lost its deadline).
	UntilKill
	// Forever: a call blocks until Cont, whatever happens (a backend
	// stuck past every bound: the session must be given up on).
	Forever
)

// Hang is a Machine whose guest can be stopped, as by SIGSTOP of its QEMU:
// while it is stopped every Call, Checkpoint, Restore and Delete blocks
// (how: its HangMode) before reaching the Machine. Kill, like
// qemu.Machine's, fails the calls in flight and every later one with
// vmm.ErrGuestDied without waiting for them.
type Hang struct {
	*Machine

	mu      sync.Mutex
	mode    HangMode
	stopped chan struct{} // non-nil while stopped; closed by Cont
	killed  chan struct{} // closed by Kill
	blocked chan struct{} // one value per call that starts blocking
}

var _ vmm.Machine = (*Hang)(nil)

// NewHang returns a running Hang over a new Machine.
func NewHang() *Hang {
	return &Hang{Machine: &Machine{}, killed: make(chan struct{}), blocked: make(chan struct{}, 64)}
}

// Stop makes every later call block, in mode.
func (h *Hang) Stop(mode HangMode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode = mode
	if h.stopped == nil {
		h.stopped = make(chan struct{})
	}
}

// Cont lets the blocked calls and every later one through (SIGCONT).
func (h *Hang) Cont() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped != nil {
		close(h.stopped)
		h.stopped = nil
	}
}

// Blocked receives one value for each call that starts blocking.
func (h *Hang) Blocked() <-chan struct{} { return h.blocked }

// Kill fails the calls in flight and every later one with
// vmm.ErrGuestDied (the QEMU process killed). Idempotent.
func (h *Hang) Kill() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.killed:
	default:
		close(h.killed)
		h.Machine.Kill()
	}
	return nil
}

// wait blocks while the machine is stopped, as its mode says.
func (h *Hang) wait(ctx context.Context) error {
	h.mu.Lock()
	stopped, mode := h.stopped, h.mode
	h.mu.Unlock()
	select {
	case <-h.killed:
		return fmt.Errorf("hang: killed: %w", vmm.ErrGuestDied)
	default:
	}
	if stopped == nil {
		return nil
	}
	select {
	case h.blocked <- struct{}{}:
	default:
	}
	done, killed := ctx.Done(), h.killed
	switch mode {
	case UntilKill:
		done = nil
	case Forever:
		done, killed = nil, nil
	}
	select {
	case <-stopped:
		return nil
	case <-killed:
		return fmt.Errorf("hang: killed while stopped: %w", vmm.ErrGuestDied)
	case <-done:
		return fmt.Errorf("hang: agent silent: %w", ctx.Err())
	}
}

// Call implements vmm.Machine.
func (h *Hang) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return h.Machine.Call(ctx, req)
}

// Checkpoint implements vmm.Machine.
func (h *Hang) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	if err := h.wait(ctx); err != nil {
		return 0, err
	}
	return h.Machine.Checkpoint(ctx)
}

// Restore implements vmm.Machine.
func (h *Hang) Restore(ctx context.Context, id vmm.CheckpointID) error {
	if err := h.wait(ctx); err != nil {
		return err
	}
	return h.Machine.Restore(ctx, id)
}

// Delete implements vmm.Machine.
func (h *Hang) Delete(ctx context.Context, id vmm.CheckpointID) error {
	if err := h.wait(ctx); err != nil {
		return err
	}
	return h.Machine.Delete(ctx, id)
}
