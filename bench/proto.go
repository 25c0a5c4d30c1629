package bench

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/runs/exploration/exploreproto"
	"github.com/themisfs/themis/vmm/kvm/echo"
)

// Proto is r as `themisctl --json bench explore` prints it.
func (r *Report) Proto() *themisv1.BenchExploreReport {
	out := &themisv1.BenchExploreReport{Baseline: r.Baseline.proto()}
	for _, c := range r.Runs {
		out.Runs = append(out.Runs, c.proto())
	}
	return out
}

func (c Comparison) proto() *themisv1.BenchExploreRun {
	out := &themisv1.BenchExploreRun{Ratio: c.Ratio, BacktrackRatio: c.BacktrackRatio}
	if e := c.Explore; e != nil {
		out.Summary, out.Lanes, out.Channel = exploreproto.Summary(e.Summary), e.Lanes, e.Channel
		out.States, out.StatesPerSec = int64(e.States), e.StatesPerSec
		out.PerState = &themisv1.BenchStateSplit{TotalS: ms(e.Total), OpS: ms(e.Op), FingerprintS: ms(e.Fingerprint),
			RestoreS: ms(e.Restore), CheckpointS: ms(e.Checkpoint), CheckS: ms(e.Check), BacktrackS: ms(e.Backtrack), OtherS: ms(e.Other),
			UmountS: ms(e.Umount), MountS: ms(e.Mount), DiskS: ms(e.Disk), Remounts: e.Remounts,
			AgentOpS: ms(e.AgentOp), AgentWalkS: ms(e.AgentWalk), AgentUmountS: ms(e.AgentUmount), AgentMountS: ms(e.AgentMount)}
		for _, p := range e.IO {
			out.DiskIo = append(out.DiskIo, &themisv1.BenchDiskIO{Phase: p.Phase, Requests: p.Requests, Reads: p.Reads, ReadBytes: p.ReadBytes,
				Writes: p.Writes, WriteBytes: p.WriteBytes, WriteZeroes: p.WriteZeroes, WriteZeroesBytes: p.WriteZeroesBytes,
				Flushes: p.Flushes, Rejected: p.Rejected, ServeS: ms(p.Serve)})
		}
	}
	return out
}

func (r *BaselineResult) proto() *themisv1.BenchBaseline {
	if r == nil {
		return nil
	}
	s := r.Split()
	return &themisv1.BenchBaseline{Lane: r.Lane, Fs: r.FS, ImageBytes: r.ImageBytes, States: int64(r.States), Mount: r.Mount,
		WorkDir: r.WorkDir, ElapsedS: r.Elapsed.Seconds(),
		PerState: &themisv1.BenchStateSplit{TotalS: ms(s.Total), OpS: ms(s.Op), RestoreS: ms(s.Restore), MountS: ms(s.Mount),
			UmountS: ms(s.Umount), StoreS: ms(s.Store), BacktrackS: ms(s.Backtrack)}}
}

// Proto is r as `themisctl --json bench restore` prints it.
func (r *RestoreReport) Proto() *themisv1.BenchRestoreReport {
	out := &themisv1.BenchRestoreReport{MeasuredAt: measuredAt(r.MeasuredAt), Iterations: int32(r.Iterations), DirtyLog: r.DirtyLog,
		KvmHardware: r.KVMHardware, TargetMet: r.TargetMet,
		Fit: &themisv1.BenchRestoreFit{PerPageS: ns(r.Fit.PerPageNs), FixedS: ns(r.Fit.FixedNs), Fitted: r.Fit.Fitted,
			FitRamBytes: r.Fit.FitRAMBytes, RamRatio: r.Fit.RAMRatio, RatioPages: int32(r.Fit.RatioPages)},
		Ratios: &themisv1.BenchRestoreRatios{RefPages: int32(r.Ratios.RefPages), RefRamBytes: r.Ratios.RefRAMBytes,
			QemuOverKvm: r.Ratios.QEMUOverKVM, BaselineOverKvm: r.Ratios.BaselineOverKVM},
		Target: &themisv1.BenchRestoreTarget{PerPage: r.Target.PerPage, Fixed: r.Target.Fixed, FlatInRam: r.Target.FlatInRAM},
	}
	for _, k := range r.KVM {
		out.Kvm = append(out.Kvm, &themisv1.BenchKVMRestore{RamBytes: k.RAMBytes, Pages: int32(k.Pages),
			RestoreMedianS: nsInt(k.RestoreNsMedian), RestoreP90S: nsInt(k.RestoreNsP90), HarvestS: nsInt(k.HarvestNs),
			CopyS: nsInt(k.CopyNs), StateS: nsInt(k.StateNs), PagesCopied: int32(k.PagesCopied)})
	}
	for _, a := range r.Arm {
		out.Arm = append(out.Arm, &themisv1.BenchKVMArm{RamBytes: a.RAMBytes, ArmS: nsInt(a.ArmNs), ArmBytes: a.ArmBytes})
	}
	if q := r.QEMU; q != nil {
		out.Qemu = &themisv1.BenchQEMURestore{Skipped: q.Skipped, MemoryMib: int32(q.MemoryMiB),
			RestoreMedianS: nsInt(q.RestoreNsMedian), RamMedianS: nsInt(q.RAMNsMedian), Pages: int32(q.Pages)}
	}
	if b := r.Baseline; b != nil {
		out.Baseline = &themisv1.BenchBaselineRestore{Skipped: b.Skipped, Lane: b.Lane, ImageBytes: b.ImageBytes,
			StateMedianS: nsInt(b.StateNsMedian)}
	}
	return out
}

// Proto is r as `themisctl --json bench channel` prints it.
func (r *ChannelReport) Proto() *themisv1.BenchChannelReport {
	guest := func(g ChannelGuest) *themisv1.BenchChannelGuest {
		return &themisv1.BenchChannelGuest{Path: g.Path, BootS: nsInt(g.BootNs)}
	}
	out := &themisv1.BenchChannelReport{MeasuredAt: measuredAt(r.MeasuredAt), Skipped: r.Skipped, Iterations: int32(r.Iterations),
		Files: int32(r.Files), MemoryMib: int32(r.MemoryMiB), Lane: r.Lane, Uart: guest(r.UART), Virtio: guest(r.Virtio),
		Restore: r.Restore.proto()}
	for _, row := range r.Rows {
		out.Rows = append(out.Rows, row.proto())
	}
	return out
}

func (r ChannelRow) proto() *themisv1.BenchChannelRow {
	stat := func(s ChannelStat) *themisv1.BenchLatency {
		return &themisv1.BenchLatency{MedianS: nsInt(s.NsMedian), P90S: nsInt(s.NsP90)}
	}
	return &themisv1.BenchChannelRow{Op: r.Op, Phase: r.Phase, RequestBytes: int32(r.RequestBytes), ResponseBytes: int32(r.ResponseBytes),
		Uart: stat(r.UART), Virtio: stat(r.Virtio), UartOverVirtio: r.UARTOverVirtio}
}

// Proto is r as `themisctl --json bench echo` prints it.
func (r *EchoReport) Proto() *themisv1.BenchEchoReport {
	out := &themisv1.BenchEchoReport{MeasuredAt: measuredAt(r.MeasuredAt), KvmHardware: r.KVMHardware,
		TargetExitsPerMessage: int32(r.TargetExitsPerMessage), TargetMet: r.TargetMet}
	for _, p := range r.KVMSynthetic {
		out.KvmSynthetic = append(out.KvmSynthetic, &themisv1.BenchEchoPoint{Size: int32(p.Size), Uart: echoProto(p.UART),
			Console: echoProto(p.Console), ExitRatio: p.ExitRatio, TimeRatio: p.TimeRatio})
	}
	return out
}

func echoProto(e echo.Result) *themisv1.BenchEcho {
	return &themisv1.BenchEcho{Channel: string(e.Channel), Size: int32(e.Size), Messages: int32(e.Messages), Exits: int64(e.Exits),
		ExitsPerEcho: e.ExitsPerEcho, ElapsedS: e.Elapsed.Seconds(), PerEchoS: ns(e.NsPerEcho)}
}

// measuredAt is a report's RFC 3339 start time as a timestamp (nil when
// it does not parse).
func measuredAt(s string) *timestamppb.Timestamp {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil
	}
	return timestamppb.New(t)
}

// ms, ns and nsInt turn milliseconds and nanoseconds into seconds.
func ms(v float64) float64  { return v / 1e3 }
func ns(v float64) float64  { return v / 1e9 }
func nsInt(v int64) float64 { return float64(v) / 1e9 }
