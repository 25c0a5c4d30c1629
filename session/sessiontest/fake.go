package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap/zaptest"
)

// Machine answers every agent call with success (a fingerprint whose root
// is the last checkpoint's number, ENOENT for a stat) and keeps a
// checkpoint path.
type Machine struct {
	mu     sync.Mutex
	next   vmm.CheckpointID
	path   []vmm.CheckpointID
	closed bool
	dead   bool // every call fails with ErrGuestDied
}

var _ vmm.Machine = (*Machine)(nil)

// Kill makes every later call fail with vmm.ErrGuestDied.
func (f *Machine) Kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = true
}

// Call implements vmm.Machine.
func (f *Machine) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, vmm.ErrClosed
	}
	if f.dead {
		return nil, fmt.Errorf("fake: %w", vmm.ErrGuestDied)
	}
	return Unbatch(ctx, req, func(_ context.Context, r *agentv1.Request) (*agentv1.Response, error) { return f.answer(r), nil })
}

// answer is the response to one request other than a batch: every
// fingerprint is the same one-entry root, every stat ENOENT, everything
// else succeeds. f.mu is held.
func (f *Machine) answer(req *agentv1.Request) *agentv1.Response {
	switch req.Op.(type) {
	case *agentv1.Request_Fingerprint:
		return &agentv1.Response{Result: &agentv1.Response_Fingerprint{Fingerprint: &agentv1.FingerprintResult{Root: []byte{byte(f.next)}, Entries: 1}}}
	case *agentv1.Request_Stat:
		return &agentv1.Response{Errno: int32(syscall.ENOENT), Error: "no such file"}
	}
	return &agentv1.Response{}
}

// Checkpoint implements vmm.Machine.
func (f *Machine) Checkpoint(ctx context.Context) (vmm.CheckpointID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.path = append(f.path, f.next)
	return f.next, nil
}

func (f *Machine) index(id vmm.CheckpointID) int {
	for i, p := range f.path {
		if p == id {
			return i
		}
	}
	return -1
}

// Restore implements vmm.Machine.
func (f *Machine) Restore(ctx context.Context, id vmm.CheckpointID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.index(id)
	if i < 0 {
		return vmm.ErrUnknownCheckpoint
	}
	f.path = f.path[:i+1]
	return nil
}

// Delete implements vmm.Machine.
func (f *Machine) Delete(ctx context.Context, id vmm.CheckpointID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.index(id)
	if i < 0 {
		return vmm.ErrUnknownCheckpoint
	}
	f.path = append(f.path[:i], f.path[i+1:]...)
	return nil
}

// Checkpoints implements vmm.Machine.
func (f *Machine) Checkpoints() []vmm.CheckpointID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]vmm.CheckpointID(nil), f.path...)
}

// Disks implements vmm.Machine: the double has none.
func (f *Machine) Disks() []vmm.Disk { return nil }

// Close implements vmm.Machine.
func (f *Machine) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// Machines are the machines a Manager of NewManager started, in order.
type Machines struct {
	mu   sync.Mutex
	list []vmm.Machine
}

// At returns the i-th machine started.
func (ms *Machines) At(i int) vmm.Machine {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.list[i]
}

// Len is how many machines were started.
func (ms *Machines) Len() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.list)
}

// NewManager opens a Manager in dir whose machines come from newMachine,
// given each machine's configuration (nil: a new *Machine each). Base images are real
// (baseimage.Make unless cfg.MakeBase is set; mke2fs: the test skips without it); no guest image is built. The Manager closes with the test.
func NewManager(t *testing.T, dir string, cfg session.Config, newMachine func(vmm.Config) vmm.Machine) (*session.Manager, *Machines) {
	t.Helper()
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Skip("mke2fs not installed (e2fsprogs)")
	}
	if newMachine == nil {
		newMachine = func(vmm.Config) vmm.Machine { return &Machine{} }
	}
	ms := &Machines{}
	cfg.StateDir = dir
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	cfg.Log = zaptest.NewLogger(t)
	if cfg.MakeBase == nil {
		cfg.MakeBase = baseimage.Make
	}
	cfg.Image = &guest.Image{} // the double boots nothing
	cfg.Start = func(ctx context.Context, c vmm.Config) (vmm.Machine, error) {
		ms.mu.Lock()
		defer ms.mu.Unlock()
		f := newMachine(c)
		ms.list = append(ms.list, f)
		return f, nil
	}
	m, err := session.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m, ms
}

// WantErr fails the test unless err wraps kind and, when field is set, is a
// errkind.FieldError naming field.
func WantErr(t *testing.T, err, kind error, field string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	if field != "" {
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Fatalf("error %v: want field %q", err, field)
		}
	}
}

// Unbatch answers req through call, a Batch one request at a time (its
// responses collected in a BatchResult), so that a test double wrapping a
// Machine sees every request on its own.
func Unbatch(ctx context.Context, req *agentv1.Request, call func(context.Context, *agentv1.Request) (*agentv1.Response, error)) (*agentv1.Response, error) {
	b, ok := req.Op.(*agentv1.Request_Batch)
	if !ok {
		return call(ctx, req)
	}
	out := &agentv1.BatchResult{}
	for _, r := range b.Batch.GetRequests() {
		resp, err := call(ctx, r)
		if err != nil {
			return nil, err
		}
		out.Responses = append(out.Responses, resp)
	}
	return &agentv1.Response{Result: &agentv1.Response_Batch{Batch: out}}, nil
}
