package bench

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/vmm/kvm/echo"
	"go.uber.org/zap"
)

// The agent channel target of issue 13: a 1 KiB message in at most
// TargetEchoExits vCPU exits.
const TargetEchoExits = 3

// Echo defaults and limits.
const (
	// DefaultEchoMessages is the number of round trips per size over
	// the agent console.
	DefaultEchoMessages = 200
	// MaxEchoMessages bounds EchoOptions.Messages and UARTMessages.
	MaxEchoMessages = 1_000_000
	// echoUARTBytes sizes the default UART sample: round trips of at
	// most this many bytes each way in all, at least 3 (a UART round
	// trip of 16 KiB is ~50 000 exits).
	echoUARTBytes = 64 << 10
	echoWarmup    = 2
)

// DefaultEchoSizes are the message sizes measured when EchoOptions
// leaves them empty.
var DefaultEchoSizes = []int{64, 1 << 10, 16 << 10}

// EchoOptions are the inputs of Echo.
type EchoOptions struct {
	// Sizes lists the message sizes in bytes (default DefaultEchoSizes),
	// each 1 to echo.MaxSize and a whole number of 1, 2, 4, 8 or 16
	// receive buffers of 4 KiB.
	Sizes []int
	// Messages is the number of round trips per size over the agent
	// console (default DefaultEchoMessages).
	Messages int
	// UARTMessages is the number of round trips per size over the UART (0:
	// as many as carry 64 KiB each way, at least 3, at most Messages).
	UARTMessages int
	// Progress receives one line per step (nil: none).
	Progress func(step string)
	// Log is the echo machines' logger (nil: none).
	Log *zap.Logger
}

// EchoReport is what Echo measured. Its sections are the systems
// measured (Channel measures QEMU's channels with the real guest). --json
// prints it as Proto.
type EchoReport struct {
	// MeasuredAt is when the run started (RFC 3339, UTC).
	MeasuredAt string
	// KVMHardware says whether /dev/kvm is hardware virtualization (false:
	// PVM or similar, as on this project's hosts).
	KVMHardware bool
	// KVMSynthetic has one row per size: the echo guests on /dev/kvm.
	KVMSynthetic []EchoPoint
	// TargetExitsPerMessage is TargetEchoExits; TargetMet says whether
	// the agent console carries a 1 KiB message (half a round trip) in that
	// many exits or fewer (false when 1 KiB was not measured).
	TargetExitsPerMessage int
	TargetMet             bool
}

// EchoPoint is one message size over both channels of the KVM
// backend's echo guests, and their ratios (UART over console).
type EchoPoint struct {
	Size    int
	UART    echo.Result
	Console echo.Result
	// ExitRatio and TimeRatio are the UART's exits and wall time per round
	// trip over the console's.
	ExitRatio float64
	TimeRatio float64
}

// Echo measures the agent channel side by side in one run: for every
// size, the KVM backend's echo guests (echo.Measure: synthetic guests
// on /dev/kvm, no kernel) over the UART, byte by byte, then over the agent
// console, one buffer per message. It needs Linux and /dev/kvm.
func Echo(ctx context.Context, o EchoOptions) (*EchoReport, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	r := &EchoReport{MeasuredAt: time.Now().UTC().Format(time.RFC3339), TargetExitsPerMessage: TargetEchoExits}
	r.KVMHardware = launch.Probe().KVM == launch.KVMHardware
	for _, size := range o.Sizes {
		p := EchoPoint{Size: size}
		for _, s := range []struct {
			ch  echo.Channel
			n   int
			out *echo.Result
		}{{echo.UART, o.uartMessages(size), &p.UART}, {echo.Console, o.Messages, &p.Console}} {
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("kvm-synthetic: %s, %s messages, %d round trips", s.ch, fmtBytes(int64(size)), s.n))
			}
			res, err := echo.Measure(ctx, echo.Config{Channel: s.ch, Size: size, Messages: s.n, Warmup: echoWarmup}, o.Log)
			if err != nil {
				return nil, fmt.Errorf("bench: echo: %s, %d bytes: %w", s.ch, size, err)
			}
			*s.out = res
		}
		if p.Console.ExitsPerEcho > 0 {
			p.ExitRatio = p.UART.ExitsPerEcho / p.Console.ExitsPerEcho
		}
		if p.Console.NsPerEcho > 0 {
			p.TimeRatio = p.UART.NsPerEcho / p.Console.NsPerEcho
		}
		if size == 1<<10 {
			r.TargetMet = p.Console.ExitsPerEcho/2 <= TargetEchoExits
		}
		r.KVMSynthetic = append(r.KVMSynthetic, p)
	}
	return r, nil
}

func (o *EchoOptions) normalize() error {
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultEchoSizes
	}
	switch {
	case o.Messages == 0:
		o.Messages = DefaultEchoMessages
	case o.Messages < 0 || o.Messages > MaxEchoMessages:
		return fmt.Errorf("bench: echo: %d messages: want 1..%d", o.Messages, MaxEchoMessages)
	}
	if o.UARTMessages < 0 || o.UARTMessages > MaxEchoMessages {
		return fmt.Errorf("bench: echo: %d UART messages: want 0..%d", o.UARTMessages, MaxEchoMessages)
	}
	for _, s := range o.Sizes {
		k := (s + 4095) / 4096
		if s < 1 || s > echo.MaxSize || 16%k != 0 {
			return fmt.Errorf("bench: echo: message of %d bytes: want 1..%d bytes, a whole 1, 2, 4, 8 or 16 buffers of 4 KiB", s, echo.MaxSize)
		}
	}
	return nil
}

// uartMessages is the UART sample size for messages of size bytes.
func (o *EchoOptions) uartMessages(size int) int {
	if o.UARTMessages > 0 {
		return o.UARTMessages
	}
	return min(o.Messages, max(3, echoUARTBytes/size))
}

// String renders the report as tables.
func (r *EchoReport) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "agent channel, kvm-synthetic: echo guests on /dev/kvm (%s); one round trip = a message each way\n", kvmKind(r.KVMHardware))
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "SIZE\tCHANNEL\tROUND TRIPS\tEXITS/TRIP\tTIME/TRIP\tEXITS/MESSAGE\t\n")
	for _, p := range r.KVMSynthetic {
		for _, e := range []echo.Result{p.UART, p.Console} {
			fmt.Fprintf(w, "%s\t%s\t%d\t%.1f\t%s\t%.1f\t\n", fmtBytes(int64(p.Size)), e.Channel, e.Messages, e.ExitsPerEcho, fmtNs(e.NsPerEcho), e.ExitsPerEcho/2)
		}
	}
	w.Flush()
	sb.WriteString("\nuart / virtio-console\n")
	w = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "SIZE\tEXITS\tTIME\t\n")
	for _, p := range r.KVMSynthetic {
		fmt.Fprintf(w, "%s\t%.0fx\t%.0fx\t\n", fmtBytes(int64(p.Size)), p.ExitRatio, p.TimeRatio)
	}
	w.Flush()
	verdict := "MISS"
	if r.TargetMet {
		verdict = "PASS"
	}
	fmt.Fprintf(&sb, "\ntarget: a 1 KiB message in at most %d exits over the agent console: %s\n", r.TargetExitsPerMessage, verdict)
	return sb.String()
}
