package echo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/vmm/kvm/devices"
	"go.uber.org/zap/zaptest"
)

func newEcho(t *testing.T, cfg Config, verify bool) *Guest {
	t.Helper()
	kvmtest.Need(t)
	e, err := Start(cfg, zaptest.NewLogger(t), verify)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// TestEcho: the echo guests send every message back, over COM2 byte by
// byte and over the agent console one buffer per message each way; the
// console takes at most three exits per round trip (the target is
// three per 1 KiB message) where the UART takes three per byte.
func TestEcho(t *testing.T) {
	for _, tt := range []struct {
		ch   Channel
		size int
		n    int
	}{
		{UART, 64, 20}, {UART, 1 << 10, 10}, {UART, 16 << 10, 2},
		{Console, 64, 50}, {Console, 1 << 10, 50}, {Console, 16 << 10, 50},
	} {
		t.Run(fmt.Sprintf("%s/%d", tt.ch, tt.size), func(t *testing.T) {
			e := newEcho(t, Config{Channel: tt.ch, Size: tt.size}, false)
			if err := e.Echo(1); err != nil {
				t.Fatal(err)
			}
			x0, err := e.Exits(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Echo(tt.n); err != nil {
				t.Fatal(err)
			}
			x1, err := e.Exits(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			per := float64(x1-x0) / float64(tt.n)
			t.Logf("%s, %d bytes: %.2f exits per round trip", tt.ch, tt.size, per)
			switch {
			case tt.ch == Console && per > 3.5: // 3, an occasional extra one averaged in
				t.Errorf("%.2f exits per round trip over the console, want at most 3", per)
			case tt.ch == UART && per < float64(3*tt.size):
				t.Errorf("%.2f exits per round trip over the UART, want at least 3 per byte", per)
			}
		})
	}
}

// TestEchoCheckpointRestore: a checkpoint in the middle of a conversation
// on the agent console and a restore to it put back the virtqueue cursors
// in guest RAM and in the device together: the restore passes the verify
// gate, the conversation goes on, and the same messages after it leave the
// same RAM and device state as the first time.
func TestEchoCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	e := newEcho(t, Config{Channel: Console, Size: 5000}, true) // two receive buffers per message
	if err := e.Echo(5); err != nil {
		t.Fatal(err)
	}
	c0, err := e.m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := e.sent
	want := console(e).State()
	if err := e.Echo(7); err != nil {
		t.Fatal(err)
	}
	quiesce(t, e)
	h1, err := e.m.RAMHash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s1 := console(e).State()
	for round := range 2 {
		if err := e.m.Restore(ctx, c0); err != nil {
			t.Fatalf("round %d: restore: %v", round, err)
		}
		if got := console(e).State(); !cmp.Equal(got.Queues, want.Queues) {
			t.Fatalf("round %d: queues after restore %+v, want the checkpoint's %+v", round, got.Queues, want.Queues)
		}
		e.sent = at
		if err := e.Echo(7); err != nil {
			t.Fatalf("round %d: after restore: %v", round, err)
		}
		quiesce(t, e)
		h2, err := e.m.RAMHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h2 != h1 {
			t.Errorf("round %d: RAM after the same messages %x, first time %x", round, h2[:8], h1[:8])
		}
		if diff := cmp.Diff(s1, console(e).State()); diff != "" {
			t.Errorf("round %d: console state after the same messages (-first +again):\n%s", round, diff)
		}
	}
}

// console is the machine's agent console.
func console(e *Guest) *devices.Console {
	c, _ := e.m.AgentConsole()
	return c
}

// quiesce waits (at most 5 s) until the echo guest has taken the last
// transmit interrupt: the host has the echo before the guest reads the ISR
// for it, and RAM and device state differ until it has.
func quiesce(t *testing.T, e *Guest) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for console(e).State().ISR != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the guest left the console's ISR at %#x for 5 s", console(e).State().ISR)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkChannel: one round trip of the echo guests (a message each way)
// over COM2, byte by byte, and over the agent console, one buffer per
// message, side by side at 64 B, 1 KiB and 16 KiB. exits/op is the VM's
// exit counter (Stats.Exits) per round trip.
func BenchmarkChannel(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 16 << 10} {
		for _, ch := range []Channel{UART, Console} {
			b.Run(fmt.Sprintf("size=%d/%s", size, ch), func(b *testing.B) {
				kvmtest.Need(b)
				e, err := Start(Config{Channel: ch, Size: size}, nil, false)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				if err := e.Echo(1); err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				x0, err := e.Exits(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(2 * size))
				b.ResetTimer()
				if err := e.Echo(b.N); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				x1, err := e.Exits(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(x1-x0)/float64(b.N), "exits/op")
			})
		}
	}
}
