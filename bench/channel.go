package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/qemu"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// Channel defaults and limits.
const (
	// DefaultChannelIterations is the number of samples per op, phase and
	// channel.
	DefaultChannelIterations = 30
	// MaxChannelIterations bounds ChannelOptions.Iterations.
	MaxChannelIterations = 10_000
	// DefaultChannelFiles is the number of files in the fingerprinted lane.
	DefaultChannelFiles = 20
	// MaxChannelFiles bounds ChannelOptions.Files.
	MaxChannelFiles = 1000
	// channelFileBytes is the size of each of those files.
	channelFileBytes = 512
)

// Channel phases: when in a guest's life a call is timed.
const (
	// PhaseBoot times calls one after the other on a guest that has booted
	// and has not been restored since: TCG's translated code is warm.
	PhaseBoot = "boot"
	// PhaseRestore times the first call after a restore (snapshot-load
	// flushes TCG's translated code): the cost explore pays per state.
	PhaseRestore = "restore"
)

// ChannelOptions are the inputs of Channel.
type ChannelOptions struct {
	// Iterations is the number of samples per op, phase and channel
	// (default DefaultChannelIterations); the restore phase restores once
	// per sample.
	Iterations int
	// Files is the number of files (512 bytes each) in the lane the
	// fingerprint walks (default DefaultChannelFiles).
	Files int
	// CacheDir is the guest image cache (guest.Options.CacheDir).
	CacheDir string
	// Progress receives one line per step (nil: none).
	Progress func(step string)
	// Log is the machines' and the image builder's logger (nil: none).
	Log *zap.Logger
}

// ChannelReport is what Channel measured: the agent channel on the UART
// beside the virtio-serial port, the same calls on two guests booted from
// the same image, interleaved call by call. Durations are nanoseconds;
// --json prints it as Proto.
type ChannelReport struct {
	// MeasuredAt is when the run started (RFC 3339, UTC).
	MeasuredAt string
	// Skipped says why nothing was measured ("" when it was).
	Skipped string
	// Iterations and Files are the options the run had.
	Iterations int
	Files      int
	// MemoryMiB is each guest's RAM; Lane the lane spec of its disk.
	MemoryMiB int
	Lane      string
	// UART and Virtio describe the two guests.
	UART   ChannelGuest
	Virtio ChannelGuest
	// Rows has one row per (op, phase), ops in ChannelOps order, PhaseBoot
	// first.
	Rows []ChannelRow
	// Restore is the restores of the PhaseRestore rows themselves (Op
	// "restore", no request): whether the channel's device changes what a
	// snapshot-load costs.
	Restore ChannelRow
}

// ChannelGuest is one of the two guests.
type ChannelGuest struct {
	// Path is the guest device the agent served on (its ready line).
	Path string
	// BootNs is the time from start to agent-ready.
	BootNs int64
}

// ChannelRow is one op in one phase on both channels.
type ChannelRow struct {
	// Op names the call (ChannelOps); Phase is PhaseBoot or PhaseRestore.
	Op    string
	Phase string
	// RequestBytes and ResponseBytes are the frames' sizes (without the
	// 4-byte length).
	RequestBytes  int
	ResponseBytes int
	// UART and Virtio are the call's round trip on each channel.
	UART   ChannelStat
	Virtio ChannelStat
	// UARTOverVirtio is the ratio of the medians.
	UARTOverVirtio float64
}

// ChannelStat is a distribution of round trips.
type ChannelStat struct {
	NsMedian int64
	NsP90    int64
}

// channelOp is one timed call.
type channelOp struct {
	name string
	req  func(lane string) *agentv1.Request
}

// ChannelOps names the timed calls, in report order: a Ping (no payload),
// a write request carrying 1 KiB and one carrying 16 KiB, and a
// fingerprint with every leaf of the lane (the reply explore waits for per
// state).
var ChannelOps = func() []string {
	var names []string
	for _, op := range channelOps() {
		names = append(names, op.name)
	}
	return names
}()

// channelOps are the timed calls, each with its request for a lane.
func channelOps() []channelOp {
	write := func(n int) func(string) *agentv1.Request {
		data := bytes.Repeat([]byte{0x5a}, n)
		return func(lane string) *agentv1.Request {
			return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: lane, Path: "w", Flags: 0o101, Data: data}}}
		}
	}
	return []channelOp{
		{"ping", func(string) *agentv1.Request {
			return &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}}
		}},
		{"write-1k", write(1 << 10)},
		{"write-16k", write(16 << 10)},
		{"fingerprint", func(lane string) *agentv1.Request {
			return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_ALL, Leaves: true}}}
		}},
	}
}

// Channel measures the agent channel side by side in one run: two QEMU
// guests from the same image, one with the agent on the UART and one on
// the virtio-serial port, each with an ext2 lane holding o.Files files.
// Every op of ChannelOps is timed o.Iterations times per phase on each
// guest, the guests taking turns call by call (who goes first alternates)
// so that the host's noise falls on both: first one after the other
// (PhaseBoot), then each call right after a restore to a checkpoint taken
// once the files were written (PhaseRestore; the restores are timed too).
// Without QEMU or a guest image the report says why it was skipped; that
// is not an error.
func Channel(ctx context.Context, o ChannelOptions) (_ *ChannelReport, err error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	r := &ChannelReport{MeasuredAt: time.Now().UTC().Format(time.RFC3339), Iterations: o.Iterations, Files: o.Files, MemoryMiB: qemuMemoryMiB, Lane: DefaultBaselineLane}
	step := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	host := launch.Probe()
	if host.QEMU == "" {
		r.Skipped = "qemu-system-x86_64 not installed (apt-get install qemu-system-x86 qemu-utils)"
		return r, nil
	}
	img, err := guest.Build(ctx, guest.Options{CacheDir: o.CacheDir, Log: o.Log})
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		r.Skipped = fmt.Sprintf("no guest image: %v", err)
		return r, nil
	}
	var guests [2]*channelGuest
	defer func() {
		for _, g := range guests {
			if g != nil {
				err = errors.Join(err, g.Close())
			}
		}
	}()
	for i, ch := range []vmm.AgentChannel{vmm.AgentUART, vmm.AgentVirtio} {
		step("boot a guest with the agent on the %s (%d MiB, %s lane, %d files)", ch, qemuMemoryMiB, DefaultBaselineLane, o.Files)
		if guests[i], err = bootChannel(ctx, o, img, ch); err != nil {
			return nil, fmt.Errorf("bench: channel %s: %w", ch, err)
		}
	}
	r.UART, r.Virtio = guests[0].info, guests[1].info
	step("%d calls of each op per phase on each guest, interleaved", o.Iterations)
	if r.Rows, r.Restore, err = measureChannels(ctx, guests, o.Iterations); err != nil {
		return nil, fmt.Errorf("bench: channel: %w", err)
	}
	return r, nil
}

func (o *ChannelOptions) normalize() error {
	switch {
	case o.Iterations == 0:
		o.Iterations = DefaultChannelIterations
	case o.Iterations < 0 || o.Iterations > MaxChannelIterations:
		return fmt.Errorf("bench: channel: iterations %d: want 1..%d", o.Iterations, MaxChannelIterations)
	}
	switch {
	case o.Files == 0:
		o.Files = DefaultChannelFiles
	case o.Files < 0 || o.Files > MaxChannelFiles:
		return fmt.Errorf("bench: channel: files %d: want 1..%d", o.Files, MaxChannelFiles)
	}
	return nil
}

// channelGuest is one booted guest with its lane filled and checkpointed.
type channelGuest struct {
	*launch.Guest
	info ChannelGuest
	lane string
	c0   vmm.CheckpointID
}

// bootChannel boots a QEMU guest with the agent on ch, writes the lane's
// files and checkpoints it.
func bootChannel(ctx context.Context, o ChannelOptions, img *guest.Image, ch vmm.AgentChannel) (_ *channelGuest, err error) {
	spec, err := guest.ParseLaneSpec(DefaultBaselineLane)
	if err != nil {
		return nil, err
	}
	var m *qemu.Machine
	start := func(ctx context.Context, cfg vmm.Config) (vmm.Machine, error) {
		cfg.AgentChannel = ch
		var err error
		m, err = qemu.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	lg, err := launch.Boot(ctx, launch.Spec{MakeBase: baseimage.Make, Image: img, CacheDir: o.CacheDir,
		Lanes: []guest.LaneSpec{spec}, MemoryMiB: qemuMemoryMiB, Restore: vmm.RestoreDevices,
		Backend: launch.Choice{Backend: launch.QEMU}, Start: start, Log: o.Log})
	if err != nil {
		return nil, err
	}
	g := &channelGuest{Guest: lg, lane: spec.Name, info: ChannelGuest{Path: m.AgentPath(), BootNs: lg.StartTime.Nanoseconds()}}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
		}
	}()
	fill := bytes.Repeat([]byte{0xa5}, channelFileBytes)
	for i := range o.Files {
		req := &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: g.lane, Path: fmt.Sprintf("f-%03d", i), Flags: 0o101, Data: fill}}}
		if _, err := g.call(ctx, req); err != nil {
			return nil, fmt.Errorf("write file %d: %w", i, err)
		}
	}
	if _, err := g.call(ctx, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}}); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	if g.c0, err = g.Machine.Checkpoint(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// call runs req and returns the response's size; an errno is an error.
func (g *channelGuest) call(ctx context.Context, req *agentv1.Request) (int, error) {
	resp, err := g.Machine.Call(ctx, req)
	if err != nil {
		return 0, err
	}
	if err := agent.ResponseError(resp); err != nil {
		return 0, err
	}
	return proto.Size(resp), nil
}

// measureChannels times every op in both phases on both guests
// (guests[0] the UART's, guests[1] the virtio port's); restore is the
// restores of the restore phase themselves.
func measureChannels(ctx context.Context, guests [2]*channelGuest, iterations int) (rows []ChannelRow, restore ChannelRow, err error) {
	var restores [2][]int64
	for _, phase := range []string{PhaseBoot, PhaseRestore} {
		for _, op := range channelOps() {
			row := ChannelRow{Op: op.name, Phase: phase, RequestBytes: proto.Size(op.req(guests[0].lane))}
			var ns [2][]int64
			for i := range iterations {
				for k := range 2 {
					j := (i + k) % 2 // who goes first alternates
					s, err := guests[j].timeCall(ctx, op.req(guests[j].lane), phase == PhaseRestore)
					if err != nil {
						return nil, restore, fmt.Errorf("%s after %s on guest %d: %w", op.name, phase, j, err)
					}
					ns[j] = append(ns[j], s.call.Nanoseconds())
					if phase == PhaseRestore {
						restores[j] = append(restores[j], s.restore.Nanoseconds())
					}
					row.ResponseBytes = s.size
				}
			}
			row.setStats(ns)
			rows = append(rows, row)
		}
	}
	restore = ChannelRow{Op: "restore", Phase: PhaseRestore}
	restore.setStats(restores)
	return rows, restore, nil
}

// setStats sets the row's medians, p90s and ratio from the samples of the
// UART's guest (ns[0]) and the virtio port's (ns[1]).
func (row *ChannelRow) setStats(ns [2][]int64) {
	row.UART = ChannelStat{NsMedian: median(ns[0]), NsP90: percentile(ns[0], 90)}
	row.Virtio = ChannelStat{NsMedian: median(ns[1]), NsP90: percentile(ns[1], 90)}
	row.UARTOverVirtio = ratio(float64(row.UART.NsMedian), float64(row.Virtio.NsMedian))
}

// callSample is one timed call: the restore before it (restore phase),
// the call, and the response's size.
type callSample struct {
	restore, call time.Duration
	size          int
}

// timeCall restores the checkpoint first where restore is set, then times
// one call.
func (g *channelGuest) timeCall(ctx context.Context, req *agentv1.Request, restore bool) (callSample, error) {
	var s callSample
	if restore {
		t0 := time.Now()
		if err := g.Machine.Restore(ctx, g.c0); err != nil {
			return s, err
		}
		s.restore = time.Since(t0)
	}
	t0 := time.Now()
	size, err := g.call(ctx, req)
	s.call, s.size = time.Since(t0), size
	return s, err
}

// String renders the report: one line per op and phase, both channels'
// medians (p90) and their ratio.
func (r *ChannelReport) String() string {
	var sb strings.Builder
	if r.Skipped != "" {
		fmt.Fprintf(&sb, "agent channel: skipped: %s\n", r.Skipped)
		return sb.String()
	}
	fmt.Fprintf(&sb, "agent channel on QEMU TCG, UART (%s) beside virtio-serial (%s): %d MiB guests, %s lane with %d files, %d calls per op and phase, interleaved\n",
		r.UART.Path, r.Virtio.Path, r.MemoryMiB, r.Lane, r.Files, r.Iterations)
	fmt.Fprintf(&sb, "boot to agent-ready: uart %s, virtio %s\n", fmtNs(float64(r.UART.BootNs)), fmtNs(float64(r.Virtio.BootNs)))
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "OP\tPHASE\tREQ\tRESP\tUART MEDIAN (P90)\tVIRTIO MEDIAN (P90)\tUART / VIRTIO\t\n")
	for _, row := range append(r.Rows, r.Restore) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s (%s)\t%s (%s)\t%.2f\t\n", row.Op, row.Phase, fmtFrame(row.RequestBytes), fmtFrame(row.ResponseBytes),
			fmtNs(float64(row.UART.NsMedian)), fmtNs(float64(row.UART.NsP90)),
			fmtNs(float64(row.Virtio.NsMedian)), fmtNs(float64(row.Virtio.NsP90)), row.UARTOverVirtio)
	}
	w.Flush()
	return sb.String()
}

// fmtFrame renders a frame size; "-" for none (the restore row).
func fmtFrame(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d B", n)
}
