package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
	"go.uber.org/zap"
)

// The restore target of issue 7: at most TargetPerPageNs per dirtied page
// plus at most TargetFixedNs, flat in guest RAM size. "Flat" is read as: at
// the largest dirty set, the largest RAM size restores within
// TargetRAMRatio times the smallest's time (the rest is this host's noise).
const (
	TargetPerPageNs = 500
	TargetFixedNs   = 100_000
	TargetRAMRatio  = 1.2
)

// Restore defaults and limits.
const (
	// DefaultRestoreIterations is the number of run → restore rounds per
	// point.
	DefaultRestoreIterations = 50
	// MaxRestoreIterations bounds RestoreOptions.Iterations.
	MaxRestoreIterations = 1_000_000
	// qemuMemoryMiB is the QEMU guest's RAM: the size docs/benchmarks.md
	// measures at.
	qemuMemoryMiB = 128
	// kvmExitCode is the code the synthetic guest exits with.
	kvmExitCode = 0x7e57
)

// DefaultRestoreRAM and DefaultRestorePages are the measured grid when
// RestoreOptions leaves it empty: the dirty sets of the target, at two RAM
// sizes eight times apart.
var (
	DefaultRestoreRAM   = []int64{256 << 20, 2 << 30}
	DefaultRestorePages = []int{1, 10, 100, 1000, 10000}
)

// RestoreOptions are the inputs of Restore.
type RestoreOptions struct {
	// RAM lists the synthetic guests' RAM sizes in bytes (default
	// DefaultRestoreRAM), each within kvm.MinMemory..kvm.MaxMemory.
	RAM []int64
	// Pages lists the dirty-set sizes, in pages, each at least 1 (default
	// DefaultRestorePages).
	Pages []int
	// Iterations is the number of run → restore rounds per (RAM, pages)
	// point and of the QEMU and baseline samples (default 50).
	Iterations int
	// DirtyRing makes the synthetic guests use the dirty ring instead of
	// the dirty bitmap.
	DirtyRing bool
	// QEMU also measures the QEMU backend: a real guest (devices-only
	// restore, 128 MiB, one ext2 lane), restored after a 4 KiB write. It is
	// skipped, with the reason in the report, without qemu-system-x86_64 or
	// a guest image.
	QEMU bool
	// Baseline also measures the in-OS remount baseline (Baseline) on the
	// same ext2 lane image. It is skipped, with the reason in the report,
	// where the host cannot loop-mount.
	Baseline bool
	// CacheDir is the guest image cache (guest.Options.CacheDir).
	CacheDir string
	// Progress receives one line per step (nil: none).
	Progress func(step string)
	// Log is the QEMU machine's and the image builder's logger (nil: none).
	Log *zap.Logger
}

// RestoreReport is what Restore measured. Durations are nanoseconds; --json
// prints it as Proto.
type RestoreReport struct {
	// MeasuredAt is when the run started (RFC 3339, UTC).
	MeasuredAt string
	// Iterations is the number of samples per point.
	Iterations int
	// DirtyLog is the synthetic guests' dirty tracking: "bitmap" or "ring".
	DirtyLog string
	// KVMHardware says whether /dev/kvm is hardware virtualization (false:
	// PVM or similar, as on this project's hosts).
	KVMHardware bool
	// KVM has one row per (RAM, pages) point, RAM-major.
	KVM []KVMRestore
	// Arm has one row per RAM size.
	Arm []KVMArm
	// Fit is the line through the KVM points against the target.
	Fit RestoreFit
	// QEMU is the QEMU backend's restore; nil when not asked for.
	QEMU *QEMURestore
	// Baseline is the in-OS remount baseline; nil when not asked for.
	Baseline *BaselineRestore
	// Ratios put QEMU and the baseline beside one KVM point.
	Ratios RestoreRatios
	// Target says which parts of the target the fit meets; TargetMet is
	// all of them.
	Target    TargetCheck
	TargetMet bool
}

// KVMRestore is one (RAM, pages) point of the KVM backend: medians over the
// iterations unless named otherwise.
type KVMRestore struct {
	// RAMBytes is guest RAM; Pages the pages the guest dirtied per run.
	RAMBytes int64
	Pages    int
	// RestoreNsMedian and RestoreNsP90 are the whole restore.
	RestoreNsMedian int64
	RestoreNsP90    int64
	// HarvestNs (read and re-arm the dirty log), CopyNs (copy the pages
	// back) and StateNs (vCPU, VM and device state) split it (kvm.Stats).
	HarvestNs int64
	CopyNs    int64
	StateNs   int64
	// PagesCopied is the pages the restore copied back: Pages plus the
	// page-table pages whose accessed/dirty bits the run changed.
	PagesCopied int
}

// KVMArm is the one-time root copy at the first checkpoint of a fresh
// synthetic guest (only the populated parts of RAM are copied): the median
// over the machines of that RAM size.
type KVMArm struct {
	RAMBytes int64
	ArmNs    int64
	ArmBytes int64
}

// RestoreFit is the least-squares line restore = FixedNs + PerPageNs ×
// pages through the median restores at the smallest RAM size, and the RAM
// ratio at the largest dirty set.
type RestoreFit struct {
	// PerPageNs and FixedNs are the slope and intercept; Fitted is false
	// when fewer than two distinct page counts were measured.
	PerPageNs float64
	FixedNs   float64
	Fitted    bool
	// FitRAMBytes is the RAM size the line is fitted at.
	FitRAMBytes int64
	// RAMRatio is the median restore at the largest RAM size over the one
	// at the smallest, both at RatioPages (the largest dirty set); 0 with a
	// single RAM size.
	RAMRatio   float64
	RatioPages int
}

// QEMURestore is the QEMU backend's devices-only restore after one small
// agent op (a 4 KiB write on the mounted ext2 lane): medians.
type QEMURestore struct {
	// Skipped says why it was not measured ("" when it was).
	Skipped string
	// MemoryMiB is the guest's RAM.
	MemoryMiB int
	// RestoreNsMedian is the whole restore, RAMNsMedian the part spent
	// finding and copying back the changed RAM pages, Pages how many.
	RestoreNsMedian int64
	RAMNsMedian     int64
	Pages           int
}

// BaselineRestore is the Metis-style in-OS remount baseline: per state,
// copy the image in, loop-mount, one op, unmount, copy the image out.
type BaselineRestore struct {
	// Skipped says why it was not measured ("" when it was).
	Skipped string
	// Lane and ImageBytes are the image's lane spec and size.
	Lane       string
	ImageBytes int64
	// StateNsMedian is the median wall time of one state.
	StateNsMedian int64
}

// RestoreRatios compare QEMU and the baseline with the KVM restore at
// RefPages pages and RefRAMBytes of RAM (the page count nearest 100 at the
// smallest RAM size). A ratio is 0 where a side was not measured.
type RestoreRatios struct {
	RefPages        int
	RefRAMBytes     int64
	QEMUOverKVM     float64
	BaselineOverKVM float64
}

// TargetCheck is the target, part by part.
type TargetCheck struct {
	PerPage   bool
	Fixed     bool
	FlatInRAM bool
}

// Restore measures restore time side by side in one run: the KVM backend
// with synthetic guests for every RAM size × dirty-set size (each on a
// fresh machine: load x86asm.DirtyProgram, checkpoint once, then Iterations ×
// run → restore), then, as asked, the QEMU backend's restore of a real guest
// and the in-OS remount baseline. It fits the KVM numbers against the
// target. A missed target is a result, not an error.
func Restore(ctx context.Context, o RestoreOptions) (*RestoreReport, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	step := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	r := &RestoreReport{MeasuredAt: time.Now().UTC().Format(time.RFC3339), Iterations: o.Iterations, DirtyLog: "bitmap"}
	if o.DirtyRing {
		r.DirtyLog = "ring"
	}
	host := launch.Probe()
	r.KVMHardware = host.KVM == launch.KVMHardware
	for _, ram := range o.RAM {
		var arms, armBytes []int64
		for _, n := range o.Pages {
			step("kvm: %s RAM, %d dirtied pages, %d restores", fmtBytes(ram), n, o.Iterations)
			p, arm, err := measureKVM(ctx, kvm.VMConfig{MemoryBytes: ram, DirtyRing: o.DirtyRing}, n, o.Iterations)
			if err != nil {
				return nil, fmt.Errorf("bench: restore: kvm %s RAM, %d pages: %w", fmtBytes(ram), n, err)
			}
			r.KVM = append(r.KVM, p)
			arms, armBytes = append(arms, arm.ns), append(armBytes, arm.bytes)
		}
		r.Arm = append(r.Arm, KVMArm{RAMBytes: ram, ArmNs: median(arms), ArmBytes: median(armBytes)})
	}
	if o.QEMU {
		step("qemu: boot a guest (%d MiB, ext2 lane), %d devices-only restores after a 4 KiB write", qemuMemoryMiB, o.Iterations)
		q, err := measureQEMU(ctx, o, host)
		if err != nil {
			return nil, fmt.Errorf("bench: restore: qemu: %w", err)
		}
		if q.Skipped != "" {
			step("qemu: skipped: %s", q.Skipped)
		}
		r.QEMU = q
	}
	if o.Baseline {
		step("baseline: %d states of loop-mount, one op, unmount, copy back", o.Iterations)
		b, err := measureBaseline(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("bench: restore: %w", err)
		}
		if b.Skipped != "" {
			step("baseline: skipped: %s", b.Skipped)
		}
		r.Baseline = b
	}
	r.Fit = fitRestore(r.KVM)
	r.Ratios = ratios(r.KVM, r.QEMU, r.Baseline)
	r.Target = checkTarget(r.Fit)
	r.TargetMet = r.Target.PerPage && r.Target.Fixed && r.Target.FlatInRAM
	return r, nil
}

func (o *RestoreOptions) normalize() error {
	if len(o.RAM) == 0 {
		o.RAM = DefaultRestoreRAM
	}
	if len(o.Pages) == 0 {
		o.Pages = DefaultRestorePages
	}
	switch {
	case o.Iterations == 0:
		o.Iterations = DefaultRestoreIterations
	case o.Iterations < 0 || o.Iterations > MaxRestoreIterations:
		return fmt.Errorf("bench: restore: iterations %d: want 1..%d", o.Iterations, MaxRestoreIterations)
	}
	maxPages := 0
	for _, n := range o.Pages {
		if n < 1 {
			return fmt.Errorf("bench: restore: %d pages: want at least 1", n)
		}
		maxPages = max(maxPages, n)
	}
	for _, ram := range o.RAM {
		if ram < kvm.MinMemory || ram > kvm.MaxMemory || ram%kvm.PageSize != 0 {
			return fmt.Errorf("bench: restore: RAM %d bytes: want a multiple of %d in %s..%s", ram, kvm.PageSize, fmtBytes(kvm.MinMemory), fmtBytes(kvm.MaxMemory))
		}
		if room := (ram - kvm.DataAddr) / kvm.PageSize; int64(maxPages) > room {
			return fmt.Errorf("bench: restore: %d pages do not fit in %s of RAM (at most %d)", maxPages, fmtBytes(ram), room)
		}
	}
	return nil
}

// armSample is one machine's arm: its duration and the bytes it copied.
type armSample struct{ ns, bytes int64 }

// measureQEMU boots a real guest on the QEMU backend and times
// devices-only restores.
func measureQEMU(ctx context.Context, o RestoreOptions, host launch.Host) (_ *QEMURestore, err error) {
	q := &QEMURestore{MemoryMiB: qemuMemoryMiB}
	if host.QEMU == "" {
		q.Skipped = "qemu-system-x86_64 not installed (apt-get install qemu-system-x86 qemu-utils)"
		return q, nil
	}
	img, err := guest.Build(ctx, guest.Options{CacheDir: o.CacheDir, Log: o.Log})
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		q.Skipped = fmt.Sprintf("no guest image: %v", err)
		return q, nil
	}
	g, err := bootQEMU(ctx, o, host, img)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, g.Close()) }()
	if err := q.measure(ctx, g, o.Iterations); err != nil {
		return nil, err
	}
	return q, nil
}

// bootQEMU boots the guest on QEMU with the default baseline lane mounted.
func bootQEMU(ctx context.Context, o RestoreOptions, host launch.Host, img *guest.Image) (*launch.Guest, error) {
	spec, err := guest.ParseLaneSpec(DefaultBaselineLane)
	if err != nil {
		return nil, err
	}
	choice, err := launch.Choose(host, launch.QEMU)
	if err != nil {
		return nil, err
	}
	return launch.Boot(ctx, launch.Spec{MakeBase: baseimage.Make,
		Image: img, CacheDir: o.CacheDir, Lanes: []guest.LaneSpec{spec}, MemoryMiB: qemuMemoryMiB,
		Restore: vmm.RestoreDevices, Backend: choice, Log: o.Log,
	})
}

// measure checkpoints the guest, then iterations times writes 4 KiB to the
// lane and restores, and records the medians.
func (q *QEMURestore) measure(ctx context.Context, g *launch.Guest, iterations int) error {
	m := g.Machine
	timings, ok := m.(vmm.Timings)
	if !ok {
		return fmt.Errorf("%T records no timings", m)
	}
	lane := g.Lanes[0].Spec.Name
	call := func(req *agentv1.Request) error {
		resp, err := m.Call(ctx, req)
		if err != nil {
			return err
		}
		return agent.ResponseError(resp)
	}
	c0, err := m.Checkpoint(ctx)
	if err != nil {
		return err
	}
	var times, ram, pages []int64
	for i := range iterations {
		write := &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Lane: lane, Path: fmt.Sprintf("f%d", i%4), Flags: 0o101, Size: 4096, Fill: 0x55}}}
		if err := call(write); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		t0 := time.Now()
		if err := m.Restore(ctx, c0); err != nil {
			return err
		}
		times = append(times, time.Since(t0).Nanoseconds())
		ti := timings.Timings()
		ram, pages = append(ram, ti.RestoreRAM.Nanoseconds()), append(pages, int64(ti.RestorePages))
	}
	q.RestoreNsMedian, q.RAMNsMedian, q.Pages = median(times), median(ram), int(median(pages))
	return nil
}

// measureBaseline runs Baseline on the default ext2 lane, one state per
// iteration.
func measureBaseline(ctx context.Context, o RestoreOptions) (*BaselineRestore, error) {
	res, err := Baseline(ctx, BaselineOptions{Lane: DefaultBaselineLane, CacheDir: o.CacheDir, States: o.Iterations})
	if errors.Is(err, ErrUnavailable) {
		return &BaselineRestore{Skipped: err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	ns := make([]int64, len(res.StateTimes))
	for i, d := range res.StateTimes {
		ns[i] = d.Nanoseconds()
	}
	return &BaselineRestore{Lane: res.Lane, ImageBytes: res.ImageBytes, StateNsMedian: median(ns)}, nil
}

// fitRestore fits the points at the smallest RAM size and takes the RAM
// ratio at the largest page count.
func fitRestore(points []KVMRestore) RestoreFit {
	var f RestoreFit
	if len(points) == 0 {
		return f
	}
	minRAM, maxRAM, maxPages := points[0].RAMBytes, points[0].RAMBytes, 0
	for _, p := range points {
		minRAM, maxRAM, maxPages = min(minRAM, p.RAMBytes), max(maxRAM, p.RAMBytes), max(maxPages, p.Pages)
	}
	var xs, ys []float64
	for _, p := range points {
		if p.RAMBytes == minRAM {
			xs, ys = append(xs, float64(p.Pages)), append(ys, float64(p.RestoreNsMedian))
		}
	}
	f.FitRAMBytes, f.RatioPages = minRAM, maxPages
	f.PerPageNs, f.FixedNs, f.Fitted = fitLine(xs, ys)
	if maxRAM != minRAM {
		lo, hi := point(points, minRAM, maxPages), point(points, maxRAM, maxPages)
		if lo != nil && hi != nil && lo.RestoreNsMedian > 0 {
			f.RAMRatio = float64(hi.RestoreNsMedian) / float64(lo.RestoreNsMedian)
		}
	}
	return f
}

// fitLine is the ordinary least-squares line y = slope·x + intercept; ok is
// false with fewer than two distinct x.
func fitLine(xs, ys []float64) (slope, intercept float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	slope = sxy / sxx
	return slope, my - slope*mx, true
}

func point(points []KVMRestore, ram int64, pages int) *KVMRestore {
	for i := range points {
		if points[i].RAMBytes == ram && points[i].Pages == pages {
			return &points[i]
		}
	}
	return nil
}

// ratios compares QEMU and the baseline with the KVM point at the smallest
// RAM size whose page count is nearest 100 (in log scale).
func ratios(points []KVMRestore, q *QEMURestore, b *BaselineRestore) RestoreRatios {
	var r RestoreRatios
	var ref *KVMRestore
	for i := range points {
		p := &points[i]
		if ref == nil || p.RAMBytes < ref.RAMBytes ||
			p.RAMBytes == ref.RAMBytes && math.Abs(math.Log(float64(p.Pages)/100)) < math.Abs(math.Log(float64(ref.Pages)/100)) {
			ref = p
		}
	}
	if ref == nil {
		return r
	}
	r.RefPages, r.RefRAMBytes = ref.Pages, ref.RAMBytes
	if q != nil && q.Skipped == "" {
		r.QEMUOverKVM = ratio(float64(q.RestoreNsMedian), float64(ref.RestoreNsMedian))
	}
	if b != nil && b.Skipped == "" {
		r.BaselineOverKVM = ratio(float64(b.StateNsMedian), float64(ref.RestoreNsMedian))
	}
	return r
}

func checkTarget(f RestoreFit) TargetCheck {
	return TargetCheck{
		PerPage:   f.Fitted && f.PerPageNs <= TargetPerPageNs,
		Fixed:     f.Fitted && f.FixedNs <= TargetFixedNs,
		FlatInRAM: f.RAMRatio > 0 && f.RAMRatio <= TargetRAMRatio,
	}
}

// median is the upper median (0 for none).
func median(v []int64) int64 { return percentile(v, 50) }

// percentile is the nearest-rank p-th percentile (0 for none).
func percentile(v []int64, p int) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if p == 50 {
		return s[len(s)/2]
	}
	i := (p*len(s)+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ParseSize parses a byte size: a number with an optional binary suffix K,
// M, G (or KiB, MiB, GiB; case-insensitive), e.g. "256M", "2GiB", "65536".
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	shift := 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KIB", 10}, {"MIB", 20}, {"GIB", 30}, {"K", 10}, {"M", 20}, {"G", 30}, {"B", 0}} {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M or G suffix", s)
	}
	return n << shift, nil
}

// String renders the report: the KVM grid, the arm cost, the side-by-side
// comparison and the target.
func (r *RestoreReport) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "restore, synthetic guests on /dev/kvm (%s dirty log, %s), %d restores per point\n", r.DirtyLog, kvmKind(r.KVMHardware), r.Iterations)
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "RAM\tPAGES\tMEDIAN\tP90\tHARVEST\tCOPY\tSTATE\tCOPIED\t\n")
	for _, p := range r.KVM {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", fmtBytes(p.RAMBytes), p.Pages, fmtNs(float64(p.RestoreNsMedian)), fmtNs(float64(p.RestoreNsP90)),
			fmtNs(float64(p.HarvestNs)), fmtNs(float64(p.CopyNs)), fmtNs(float64(p.StateNs)), p.PagesCopied)
	}
	w.Flush()

	if rams := ramSizes(r.KVM); len(rams) > 1 {
		sb.WriteString("\nmedian restore by RAM size (the same dirty set)\n")
		w = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(w, "PAGES\t")
		for _, ram := range rams {
			fmt.Fprintf(w, "%s\t", fmtBytes(ram))
		}
		fmt.Fprintf(w, "%s / %s\t\n", fmtBytes(rams[len(rams)-1]), fmtBytes(rams[0]))
		for _, n := range pageCounts(r.KVM) {
			fmt.Fprintf(w, "%d\t", n)
			for _, ram := range rams {
				if p := point(r.KVM, ram, n); p != nil {
					fmt.Fprintf(w, "%s\t", fmtNs(float64(p.RestoreNsMedian)))
				} else {
					fmt.Fprintf(w, "-\t")
				}
			}
			lo, hi := point(r.KVM, rams[0], n), point(r.KVM, rams[len(rams)-1], n)
			if lo != nil && hi != nil && lo.RestoreNsMedian > 0 {
				fmt.Fprintf(w, "%.2f\t\n", float64(hi.RestoreNsMedian)/float64(lo.RestoreNsMedian))
			} else {
				fmt.Fprintf(w, "-\t\n")
			}
		}
		w.Flush()
	}

	sb.WriteString("\narm (root copy at the first checkpoint of a fresh guest)\n")
	w = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "RAM\tARM\tCOPIED\t\n")
	for _, a := range r.Arm {
		fmt.Fprintf(w, "%s\t%s\t%s\t\n", fmtBytes(a.RAMBytes), fmtNs(float64(a.ArmNs)), fmtBytes(a.ArmBytes))
	}
	w.Flush()

	rt := r.Ratios
	fmt.Fprintf(&sb, "\nside by side (medians; ratio to kvm at %s RAM, %d pages)\n", fmtBytes(rt.RefRAMBytes), rt.RefPages)
	w = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "SYSTEM\tRESTORE\tPAGES COPIED\tRATIO\t\n")
	if ref := point(r.KVM, rt.RefRAMBytes, rt.RefPages); ref != nil {
		fmt.Fprintf(w, "kvm restore, %s RAM, %d dirtied pages\t%s\t%d\t1\t\n", fmtBytes(ref.RAMBytes), ref.Pages, fmtNs(float64(ref.RestoreNsMedian)), ref.PagesCopied)
	}
	switch q := r.QEMU; {
	case q == nil:
	case q.Skipped != "":
		fmt.Fprintf(w, "qemu devices restore\tskipped: %s\t\t\t\n", q.Skipped)
	default:
		fmt.Fprintf(w, "qemu devices restore, %d MiB RAM (RAM part %s)\t%s\t%d\t%.0fx\t\n", q.MemoryMiB, fmtNs(float64(q.RAMNsMedian)), fmtNs(float64(q.RestoreNsMedian)), q.Pages, rt.QEMUOverKVM)
	}
	switch b := r.Baseline; {
	case b == nil:
	case b.Skipped != "":
		fmt.Fprintf(w, "in-OS remount baseline\tskipped: %s\t\t\t\n", b.Skipped)
	default:
		fmt.Fprintf(w, "in-OS remount baseline per state, %s %s\t%s\t-\t%.0fx\t\n", b.Lane, fmtBytes(b.ImageBytes), fmtNs(float64(b.StateNsMedian)), rt.BaselineOverKVM)
	}
	w.Flush()

	f := r.Fit
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Fprintf(&sb, "\ntarget: ≤ %s per dirtied page + ≤ %s fixed, flat in RAM size\n", fmtNs(TargetPerPageNs), fmtNs(TargetFixedNs))
	if f.Fitted {
		fmt.Fprintf(&sb, "  per page  %-4s  %s (least squares over %d page counts at %s RAM)\n", verdict(r.Target.PerPage), fmtNs(f.PerPageNs), len(pageCounts(r.KVM)), fmtBytes(f.FitRAMBytes))
		fmt.Fprintf(&sb, "  fixed     %-4s  %s", verdict(r.Target.Fixed), fmtNs(f.FixedNs))
		if n := pageCounts(r.KVM); len(n) > 0 {
			if p := point(r.KVM, f.FitRAMBytes, n[0]); p != nil {
				fmt.Fprintf(&sb, " (intercept; the %d-page point: %s)", p.Pages, fmtNs(float64(p.RestoreNsMedian)))
			}
		}
		sb.WriteString("\n")
	} else {
		fmt.Fprintf(&sb, "  per page  n/a   not fitted: need at least two page counts\n  fixed     n/a   not fitted\n")
	}
	if f.RAMRatio > 0 {
		rams := ramSizes(r.KVM)
		fmt.Fprintf(&sb, "  flat RAM  %-4s  %s / %s = %.2f at %d pages (≤ %.2f)\n", verdict(r.Target.FlatInRAM), fmtBytes(rams[len(rams)-1]), fmtBytes(rams[0]), f.RAMRatio, f.RatioPages, TargetRAMRatio)
	} else {
		fmt.Fprintf(&sb, "  flat RAM  n/a   not measured: need two RAM sizes\n")
	}
	fmt.Fprintf(&sb, "target met: %v\n", r.TargetMet)
	return sb.String()
}

func kvmKind(hw bool) string {
	if hw {
		return "hardware virtualization"
	}
	return "no vmx/svm: PVM"
}

// ramSizes and pageCounts list the distinct values in ascending order.
func ramSizes(points []KVMRestore) []int64 {
	var v []int64
	for _, p := range points {
		v = append(v, p.RAMBytes)
	}
	slices.Sort(v)
	return slices.Compact(v)
}

func pageCounts(points []KVMRestore) []int {
	var v []int
	for _, p := range points {
		v = append(v, p.Pages)
	}
	slices.Sort(v)
	return slices.Compact(v)
}

// fmtNs renders nanoseconds with a unit that keeps three digits.
func fmtNs(ns float64) string {
	a := math.Abs(ns)
	switch {
	case a < 1e3:
		return fmt.Sprintf("%.0f ns", ns)
	case a < 1e6:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	case a < 1e9:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	}
	return fmt.Sprintf("%.2f s", ns/1e9)
}

// fmtBytes renders a size in the largest binary unit that divides it.
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
