package bench

import (
	"strings"
	"testing"

	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/vmm/kvm/echo"
)

func TestEchoOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    EchoOptions
		want string
	}{
		{EchoOptions{Sizes: []int{0}}, "0 bytes"},
		{EchoOptions{Sizes: []int{echo.MaxSize + 1}}, "bytes"},
		{EchoOptions{Sizes: []int{12 << 10}}, "12288 bytes"}, // three buffers
		{EchoOptions{Messages: -1}, "-1 messages"},
		{EchoOptions{UARTMessages: -1}, "-1 UART messages"},
	} {
		if err := tt.o.normalize(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("normalize(%+v) = %v, want an error mentioning %q", tt.o, err, tt.want)
		}
	}
	o := EchoOptions{}
	if err := o.normalize(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ size, want int }{{64, 200}, {1 << 10, 64}, {16 << 10, 4}, {64 << 10, 3}} {
		if got := o.uartMessages(tt.size); got != tt.want {
			t.Errorf("uartMessages(%d) = %d, want %d", tt.size, got, tt.want)
		}
	}
}

// TestEchoKVM runs the echo guests for real with tiny settings and
// checks the report's shape and the exit counts (deterministic enough:
// the UART takes three exits per byte, the console a few per round trip).
func TestEchoKVM(t *testing.T) {
	kvmtest.Need(t)
	var steps []string
	r, err := Echo(t.Context(), EchoOptions{Sizes: []int{64, 1 << 10}, Messages: 10, UARTMessages: 2,
		Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.KVMSynthetic) != 2 || len(steps) != 4 {
		t.Fatalf("%d rows, %d progress lines; want 2, 4", len(r.KVMSynthetic), len(steps))
	}
	for _, p := range r.KVMSynthetic {
		if p.UART.Messages != 2 || p.Console.Messages != 10 || p.UART.Channel != echo.UART || p.Console.Channel != echo.Console {
			t.Errorf("%d bytes: samples %+v / %+v", p.Size, p.UART, p.Console)
		}
		if p.UART.ExitsPerEcho < float64(3*p.Size) || p.Console.ExitsPerEcho > 4 || p.ExitRatio < 10 || p.UART.NsPerEcho <= 0 || p.Console.NsPerEcho <= 0 {
			t.Errorf("%d bytes: exits %.1f / %.1f, ratio %.1f", p.Size, p.UART.ExitsPerEcho, p.Console.ExitsPerEcho, p.ExitRatio)
		}
	}
	if !r.TargetMet {
		t.Errorf("target missed: %+v", r.KVMSynthetic[1].Console)
	}
	if s := r.String(); !strings.Contains(s, "kvm-synthetic") || !strings.Contains(s, "virtio-console") || !strings.Contains(s, "PASS") {
		t.Errorf("report:\n%s", s)
	}
}
