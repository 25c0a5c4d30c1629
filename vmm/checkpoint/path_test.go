package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/themisfs/themis/fork"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/vmm"
)

// fakeMemory is a naive Memory: a full copy of RAM per saved state, with
// failures injected by method name.
type fakeMemory struct {
	ram     []byte
	held    map[Ref][]byte
	next    Ref
	running bool
	fail    map[string]error // method name → its error
	calls   []string
}

func newFakeMemory() *fakeMemory {
	return &fakeMemory{ram: make([]byte, 256), held: map[Ref][]byte{}, running: true, fail: map[string]error{}}
}

func (f *fakeMemory) call(name string) error {
	f.calls = append(f.calls, name)
	return f.fail[name]
}

func (f *fakeMemory) Stop(context.Context) error {
	if err := f.call("Stop"); err != nil {
		return err
	}
	f.running = false
	return nil
}

func (f *fakeMemory) Resume(context.Context) error {
	if err := f.call("Resume"); err != nil {
		return err
	}
	f.running = true
	return nil
}

func (f *fakeMemory) Save(context.Context) (Ref, error) {
	if err := f.call("Save"); err != nil {
		return 0, err
	}
	f.next++
	f.held[f.next] = bytes.Clone(f.ram)
	return f.next, nil
}

func (f *fakeMemory) Load(_ context.Context, ref Ref, dropped []Ref) (LoadStats, error) {
	if err := f.call("Load"); err != nil {
		return LoadStats{}, err
	}
	copy(f.ram, f.held[ref])
	for _, d := range dropped {
		delete(f.held, d)
	}
	return LoadStats{Pages: 1}, nil
}

func (f *fakeMemory) Drop(_ context.Context, ref Ref) error {
	if err := f.call("Drop"); err != nil {
		return err
	}
	delete(f.held, ref)
	return nil
}

func (f *fakeMemory) Depth() int { return len(f.held) }

func (f *fakeMemory) RAMHash() ([32]byte, error) {
	if err := f.call("RAMHash"); err != nil {
		return [32]byte{}, err
	}
	return fork.Hash(f.ram), nil
}

func newDisk(t *testing.T) vmm.Disk {
	t.Helper()
	d, err := overlay.New(bytes.NewReader(make([]byte, 64<<10)), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	return vmm.Disk{Serial: "lane0", Device: d}
}

func readDisk(t *testing.T, d vmm.Disk) []byte {
	t.Helper()
	b := make([]byte, d.Device.Size())
	if _, err := d.Device.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPathAgainstModel drives a Path over a fake memory and a real overlay
// with random checkpoints, writes, restores and deletes, against a naive
// model holding a full copy of RAM and disk per checkpoint.
func TestPathAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 3))
			mem, disk := newFakeMemory(), newDisk(t)
			disk.Device.Push() // a base depth other than a fresh device's
			base := disk.Device.Depth()
			p := New(Config{Backend: "fake", Memory: mem, Disks: []vmm.Disk{disk}, Verify: true})
			type snap struct{ ram, disk []byte }
			model := map[vmm.CheckpointID]snap{}
			for step := range 300 {
				ids := p.IDs()
				switch op := rng.IntN(10); {
				case op < 4:
					mem.ram[rng.IntN(len(mem.ram))]++
					if _, err := disk.Device.WriteAt([]byte{byte(step)}, int64(rng.IntN(64<<10))); err != nil {
						t.Fatal(err)
					}
				case op < 6:
					id, err := p.Checkpoint(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					model[id] = snap{bytes.Clone(mem.ram), readDisk(t, disk)}
				case op < 8 && len(ids) > 0:
					id := ids[rng.IntN(len(ids))]
					if err := p.Restore(context.Background(), id); err != nil {
						t.Fatalf("step %d: restore %d: %v", step, id, err)
					}
					if !bytes.Equal(mem.ram, model[id].ram) || !bytes.Equal(readDisk(t, disk), model[id].disk) {
						t.Fatalf("step %d: restore %d: RAM or disk differs from the checkpoint", step, id)
					}
				case len(ids) > 0:
					id := ids[rng.IntN(len(ids))]
					if err := p.Delete(context.Background(), id); err != nil {
						t.Fatalf("step %d: delete %d: %v", step, id, err)
					}
				}
				if !mem.running {
					t.Fatalf("step %d: the guest was left stopped", step)
				}
				if got, want := disk.Device.Depth(), base+len(p.IDs()); got != want {
					t.Fatalf("step %d: overlay depth %d, want %d", step, got, want)
				}
			}
		})
	}
}

// TestPathFailures: a failure before anything changed leaves the path as it
// was and the guest running; a failure after breaks the path, leaves the
// guest stopped, and every later call reports it.
func TestPathFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	corrupt := fmt.Errorf("state failed its checksum: %w", vmm.ErrCorrupt)
	tests := []struct {
		name       string
		op         string // "checkpoint", "restore", "delete"
		fail       string // the Memory method that fails
		wantBroken bool
		err        error // the injected error (nil: boom)
	}{
		{"checkpoint: stop fails", "checkpoint", "Stop", false, nil},
		{"checkpoint: save fails", "checkpoint", "Save", false, nil},
		{"checkpoint: hash fails", "checkpoint", "RAMHash", true, nil},
		{"restore: stop fails", "restore", "Stop", false, nil},
		{"restore: load fails", "restore", "Load", true, nil},
		{"restore: load refused by its checksum", "restore", "Load", false, corrupt},
		{"restore: verify hash fails", "restore", "RAMHash", true, nil},
		{"delete: stop fails", "delete", "Stop", false, nil},
		{"delete: drop fails", "delete", "Drop", true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mem, disk := newFakeMemory(), newDisk(t)
			p := New(Config{Backend: "fake", Memory: mem, Disks: []vmm.Disk{disk}, Verify: true})
			c1, err := p.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			injected := boom
			if tc.err != nil {
				injected = tc.err
			}
			mem.fail[tc.fail] = injected
			var got error
			switch tc.op {
			case "checkpoint":
				_, got = p.Checkpoint(ctx)
			case "restore":
				got = p.Restore(ctx, c1)
			case "delete":
				got = p.Delete(ctx, c1)
			}
			if !errors.Is(got, injected) {
				t.Fatalf("%s: %v, want the injected error", tc.op, got)
			}
			if gotBroken := errors.Is(got, vmm.ErrBroken); gotBroken != tc.wantBroken {
				t.Fatalf("%s: %v: broken %v, want %v", tc.op, got, gotBroken, tc.wantBroken)
			}
			delete(mem.fail, tc.fail)
			if !tc.wantBroken {
				if tc.fail != "Stop" && !mem.running {
					t.Error("the guest was left stopped after a failure that changed nothing")
				}
				if got := p.IDs(); !slices.Equal(got, []vmm.CheckpointID{c1}) {
					t.Errorf("path %v after a failure that changed nothing, want [%d]", got, c1)
				}
				if err := p.Restore(ctx, c1); err != nil {
					t.Errorf("restore after a failure that changed nothing: %v", err)
				}
				return
			}
			if mem.running {
				t.Error("the guest was resumed after the path broke")
			}
			if !errors.Is(p.Err(), vmm.ErrGuestDied) {
				t.Errorf("Err() = %v, want it to wrap vmm.ErrGuestDied", p.Err())
			}
			mem.calls = nil
			_, cerr := p.Checkpoint(ctx)
			for name, err := range map[string]error{"checkpoint": cerr, "restore": p.Restore(ctx, c1), "delete": p.Delete(ctx, c1)} {
				if !errors.Is(err, vmm.ErrBroken) || !errors.Is(err, injected) {
					t.Errorf("%s after the path broke: %v, want ErrBroken wrapping the cause", name, err)
				}
			}
			if len(mem.calls) != 0 {
				t.Errorf("a broken path still called the memory: %v", mem.calls)
			}
		})
	}
}

func TestPathUnknownCheckpoint(t *testing.T) {
	t.Parallel()
	mem := newFakeMemory()
	p := New(Config{Backend: "fake", Memory: mem})
	ctx := context.Background()
	for name, err := range map[string]error{"restore": p.Restore(ctx, 7), "delete": p.Delete(ctx, 7)} {
		if !errors.Is(err, vmm.ErrUnknownCheckpoint) || errors.Is(err, vmm.ErrBroken) {
			t.Errorf("%s of an unknown id: %v, want ErrUnknownCheckpoint only", name, err)
		}
	}
	if len(mem.calls) != 0 || !mem.running {
		t.Errorf("an unknown id reached the memory: %v", mem.calls)
	}
}

// TestPathUsableAndTimings: Usable says closed before anything, then the
// path's break; Timings carries the backend's boot and the last
// checkpoint's and restore's durations, and may be read while they run
// (go test -race).
func TestPathUsableAndTimings(t *testing.T) {
	t.Parallel()
	mem := newFakeMemory()
	p := New(Config{Backend: "fake", Memory: mem})
	if err := p.Usable(false); err != nil {
		t.Fatalf("a fresh path: %v", err)
	}
	if err := p.Usable(true); !errors.Is(err, vmm.ErrClosed) {
		t.Fatalf("closed: %v, want ErrClosed", err)
	}
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_ = p.Timings(time.Second)
		}
	}()
	id, err := p.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Restore(ctx, id); err != nil {
		t.Fatal(err)
	}
	<-done
	tm := p.Timings(3 * time.Second)
	if tm.Boot != 3*time.Second || tm.Checkpoint <= 0 || tm.Restore <= 0 {
		t.Errorf("timings %+v: want boot 3s and a checkpoint's and a restore's duration", tm)
	}
	mem.fail["Load"] = errors.New("boom")
	if err := p.Restore(ctx, id); err == nil {
		t.Fatal("a failing load: no error")
	}
	if err := p.Usable(false); !errors.Is(err, vmm.ErrBroken) {
		t.Errorf("after a failed restore: %v, want ErrBroken", err)
	}
	if err := p.Usable(true); !errors.Is(err, vmm.ErrClosed) {
		t.Errorf("closed and broken: %v, want ErrClosed first", err)
	}
}
