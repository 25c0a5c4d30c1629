package bench

import (
	"math"
	"strings"
	"testing"
)

func TestFitLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                 string
		xs, ys               []float64
		wantSlope, wantInter float64
		wantOK               bool
	}{
		{"exact", []float64{1, 10, 100, 1000, 10000}, []float64{60_500, 65_000, 110_000, 560_000, 5_060_000}, 500, 60_000, true},
		{"flat", []float64{1, 100}, []float64{70, 70}, 0, 70, true},
		// Symmetric noise around y = 2x + 1 leaves the line.
		{"noise", []float64{0, 0, 10, 10}, []float64{0, 2, 20, 22}, 2, 1, true},
		{"one point", []float64{100}, []float64{5}, 0, 0, false},
		{"one x", []float64{100, 100}, []float64{5, 7}, 0, 0, false},
		{"none", nil, nil, 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			slope, inter, ok := fitLine(tt.xs, tt.ys)
			if ok != tt.wantOK || math.Abs(slope-tt.wantSlope) > 1e-9 || math.Abs(inter-tt.wantInter) > 1e-6 {
				t.Errorf("fitLine = %g, %g, %v; want %g, %g, %v", slope, inter, ok, tt.wantSlope, tt.wantInter, tt.wantOK)
			}
		})
	}
}

// grid makes points restore = fixed + perPage·pages at small, and scale
// times that at large.
func grid(fixed, perPage float64, small, large int64, scale float64, pages ...int) []KVMRestore {
	var out []KVMRestore
	for _, ram := range []int64{small, large} {
		if ram == 0 {
			continue
		}
		for _, n := range pages {
			v := fixed + perPage*float64(n)
			if ram == large {
				v *= scale
			}
			out = append(out, KVMRestore{RAMBytes: ram, Pages: n, RestoreNsMedian: int64(v)})
		}
	}
	return out
}

func TestFitRestore(t *testing.T) {
	t.Parallel()
	const small, large = 256 << 20, 2 << 30
	for _, tt := range []struct {
		name   string
		points []KVMRestore
		want   RestoreFit
		target TargetCheck
	}{
		{
			"meets", grid(60_000, 400, small, large, 1.05, 1, 10, 100, 1000, 10000),
			RestoreFit{PerPageNs: 400, FixedNs: 60_000, Fitted: true, FitRAMBytes: small, RAMRatio: 1.05, RatioPages: 10000},
			TargetCheck{PerPage: true, Fixed: true, FlatInRAM: true},
		},
		{
			"slow pages, grows with RAM", grid(60_000, 800, small, large, 1.5, 1, 10, 100, 1000, 10000),
			RestoreFit{PerPageNs: 800, FixedNs: 60_000, Fitted: true, FitRAMBytes: small, RAMRatio: 1.5, RatioPages: 10000},
			TargetCheck{Fixed: true},
		},
		{
			"big fixed", grid(150_000, 100, small, large, 1, 1, 100),
			RestoreFit{PerPageNs: 100, FixedNs: 150_000, Fitted: true, FitRAMBytes: small, RAMRatio: 1, RatioPages: 100},
			TargetCheck{PerPage: true, FlatInRAM: true},
		},
		{
			"one RAM size", grid(60_000, 400, small, 0, 1, 1, 100),
			RestoreFit{PerPageNs: 400, FixedNs: 60_000, Fitted: true, FitRAMBytes: small, RatioPages: 100},
			TargetCheck{PerPage: true, Fixed: true},
		},
		{
			"one page count", grid(60_000, 400, small, large, 1, 100),
			RestoreFit{FitRAMBytes: small, RAMRatio: 1, RatioPages: 100},
			TargetCheck{FlatInRAM: true},
		},
		{"none", nil, RestoreFit{}, TargetCheck{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := fitRestore(tt.points)
			if math.Abs(got.PerPageNs-tt.want.PerPageNs) > 1e-3 || math.Abs(got.FixedNs-tt.want.FixedNs) > 1 ||
				math.Abs(got.RAMRatio-tt.want.RAMRatio) > 1e-3 || got.Fitted != tt.want.Fitted ||
				got.FitRAMBytes != tt.want.FitRAMBytes || got.RatioPages != tt.want.RatioPages {
				t.Errorf("fitRestore = %+v\nwant         %+v", got, tt.want)
			}
			if c := checkTarget(got); c != tt.target {
				t.Errorf("checkTarget = %+v, want %+v", c, tt.target)
			}
		})
	}
}

func TestRatios(t *testing.T) {
	t.Parallel()
	points := grid(50_000, 500, 256<<20, 2<<30, 2, 1, 30, 1000) // 30 pages: 65 µs at 256 MiB
	for _, tt := range []struct {
		name string
		q    *QEMURestore
		b    *BaselineRestore
		want RestoreRatios
	}{
		{"both", &QEMURestore{RestoreNsMedian: 26_000_000}, &BaselineRestore{StateNsMedian: 6_500_000},
			RestoreRatios{RefPages: 30, RefRAMBytes: 256 << 20, QEMUOverKVM: 400, BaselineOverKVM: 100}},
		{"skipped", &QEMURestore{Skipped: "no qemu", RestoreNsMedian: 1}, &BaselineRestore{Skipped: "not root"},
			RestoreRatios{RefPages: 30, RefRAMBytes: 256 << 20}},
		{"not asked", nil, nil, RestoreRatios{RefPages: 30, RefRAMBytes: 256 << 20}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratios(points, tt.q, tt.b); got != tt.want {
				t.Errorf("ratios = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := ratios(nil, &QEMURestore{RestoreNsMedian: 1}, nil); got != (RestoreRatios{}) {
		t.Errorf("ratios without kvm points = %+v, want zero", got)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v           []int64
		median, p90 int64
	}{
		{nil, 0, 0},
		{[]int64{7}, 7, 7},
		{[]int64{3, 1, 2}, 2, 3},
		{[]int64{4, 1, 3, 2}, 3, 4},
		{[]int64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 6, 9},
	} {
		if got := median(tt.v); got != tt.median {
			t.Errorf("median(%v) = %d, want %d", tt.v, got, tt.median)
		}
		if got := percentile(tt.v, 90); got != tt.p90 {
			t.Errorf("percentile(%v, 90) = %d, want %d", tt.v, got, tt.p90)
		}
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"256M", 256 << 20, false},
		{"2G", 2 << 30, false},
		{"2GiB", 2 << 30, false},
		{"64mib", 64 << 20, false},
		{" 512 K ", 512 << 10, false},
		{"65536", 65536, false},
		{"4096B", 4096, false},
		{"", 0, true},
		{"M", 0, true},
		{"-1M", 0, true},
		{"1.5G", 0, true},
		{"2T", 0, true},
		{"99999999999G", 0, true},
	} {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestRestoreBadInput(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    RestoreOptions
		want string
	}{
		{RestoreOptions{Iterations: -1}, "iterations -1"},
		{RestoreOptions{Pages: []int{1, 0}}, "0 pages"},
		{RestoreOptions{RAM: []int64{1 << 20}}, "RAM 1048576 bytes"},
		{RestoreOptions{RAM: []int64{4 << 30}}, "RAM 4294967296 bytes"},
		{RestoreOptions{RAM: []int64{64<<20 + 1}}, "RAM 67108865 bytes"},
		{RestoreOptions{RAM: []int64{4 << 20}, Pages: []int{10000}}, "do not fit in 4 MiB"},
	} {
		_, err := Restore(t.Context(), tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Restore(%+v) = %v, want an error mentioning %q", tt.o, err, tt.want)
		}
	}
}

// TestRestoreString: the rendering names every part and the verdicts.
func TestRestoreString(t *testing.T) {
	t.Parallel()
	points := grid(60_000, 800, 256<<20, 2<<30, 1.05, 1, 100, 10000)
	r := &RestoreReport{Iterations: 5, DirtyLog: "bitmap", KVM: points,
		Arm:      []KVMArm{{RAMBytes: 256 << 20, ArmNs: 300_000, ArmBytes: 28 << 10}, {RAMBytes: 2 << 30, ArmNs: 1_500_000, ArmBytes: 28 << 10}},
		QEMU:     &QEMURestore{MemoryMiB: 128, RestoreNsMedian: 26_800_000, RAMNsMedian: 14_500_000, Pages: 300},
		Baseline: &BaselineRestore{Lane: "ext2", ImageBytes: 8 << 20, StateNsMedian: 8_800_000}}
	r.Fit = fitRestore(r.KVM)
	r.Ratios = ratios(r.KVM, r.QEMU, r.Baseline)
	r.Target = checkTarget(r.Fit)
	s := r.String()
	for _, want := range []string{
		"bitmap dirty log", "256 MiB", "2 GiB / 256 MiB", "1.05", "28 KiB", "1.50 ms",
		"qemu devices restore, 128 MiB RAM", "26.80 ms", "in-OS remount baseline per state, ext2 8 MiB", "8.80 ms",
		"per page  MISS  800 ns", "fixed     PASS  60.0 µs", "flat RAM  PASS", "target met: false",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
