package kvm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/themisfs/themis/internal/kvmtest"
	"go.uber.org/zap/zaptest"
)

func newEcho(t *testing.T, cfg EchoConfig, verify bool) *echoMachine {
	t.Helper()
	kvmtest.Need(t)
	e, err := newEchoMachine(cfg, zaptest.NewLogger(t), verify)
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
		ch   EchoChannel
		size int
		n    int
	}{
		{EchoUART, 64, 20}, {EchoUART, 1 << 10, 10}, {EchoUART, 16 << 10, 2},
		{EchoConsole, 64, 50}, {EchoConsole, 1 << 10, 50}, {EchoConsole, 16 << 10, 50},
	} {
		t.Run(fmt.Sprintf("%s/%d", tt.ch, tt.size), func(t *testing.T) {
			e := newEcho(t, EchoConfig{Channel: tt.ch, Size: tt.size}, false)
			if err := e.echo(1); err != nil {
				t.Fatal(err)
			}
			x0, err := e.exits(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.echo(tt.n); err != nil {
				t.Fatal(err)
			}
			x1, err := e.exits(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			per := float64(x1-x0) / float64(tt.n)
			t.Logf("%s, %d bytes: %.2f exits per round trip", tt.ch, tt.size, per)
			switch {
			case tt.ch == EchoConsole && per > 3.5: // 3, an occasional extra one averaged in
				t.Errorf("%.2f exits per round trip over the console, want at most 3", per)
			case tt.ch == EchoUART && per < float64(3*tt.size):
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
	e := newEcho(t, EchoConfig{Channel: EchoConsole, Size: 5000}, true) // two receive buffers per message
	if err := e.echo(5); err != nil {
		t.Fatal(err)
	}
	c0, err := e.m.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := e.sent
	want := e.m.vcon.State()
	if err := e.echo(7); err != nil {
		t.Fatal(err)
	}
	quiesce(t, e)
	h1, err := e.m.RAMHash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s1 := e.m.vcon.State()
	for round := range 2 {
		if err := e.m.Restore(ctx, c0); err != nil {
			t.Fatalf("round %d: restore: %v", round, err)
		}
		if got := e.m.vcon.State(); !cmp.Equal(got.Queues, want.Queues) {
			t.Fatalf("round %d: queues after restore %+v, want the checkpoint's %+v", round, got.Queues, want.Queues)
		}
		e.sent = at
		if err := e.echo(7); err != nil {
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
		if diff := cmp.Diff(s1, e.m.vcon.State()); diff != "" {
			t.Errorf("round %d: console state after the same messages (-first +again):\n%s", round, diff)
		}
	}
}

// quiesce waits (at most 5 s) until the echo guest has taken the last
// transmit interrupt: the host has the echo before the guest reads the ISR
// for it, and RAM and device state differ until it has.
func quiesce(t *testing.T, e *echoMachine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.m.vcon.State().ISR != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the guest left the console's ISR at %#x for 5 s", e.m.vcon.State().ISR)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAgentChannelChoice: once the agent is ready, the machine's agent
// channel is the console when the guest opened its port, else COM2; the
// chosen stream carries the guest's bytes.
func TestAgentChannelChoice(t *testing.T) {
	for _, tt := range []struct {
		ch   EchoChannel
		want string
	}{{EchoUART, channelUART}, {EchoConsole, channelConsole}} {
		t.Run(string(tt.ch), func(t *testing.T) {
			e := newEcho(t, EchoConfig{Channel: tt.ch, Size: 64}, false)
			if e.m.channel != channelUART || e.m.stream != e.m.uart {
				t.Fatalf("before the agent is ready: channel %s", e.m.channel)
			}
			e.m.pickChannel()
			if e.m.channel != tt.want || (e.m.stream == e.m.vport) != (tt.want == channelConsole) {
				t.Fatalf("channel %s, want %s", e.m.channel, tt.want)
			}
			e.ch = e.m.stream
			if err := e.echo(2); err != nil {
				t.Fatal(err)
			}
		})
	}
}
