package bench

import (
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/internal/kvmtest"
)

// TestRestoreKVM runs the KVM part for real with tiny settings and checks
// the report's shape, not its speed.
func TestRestoreKVM(t *testing.T) {
	kvmtest.Need(t)
	var steps []string
	r, err := Restore(t.Context(), RestoreOptions{RAM: []int64{64 << 20}, Pages: []int{1, 100}, Iterations: 5,
		Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.KVM) != 2 || len(r.Arm) != 1 || len(steps) != 2 {
		t.Fatalf("%d kvm rows, %d arm rows, %d progress lines; want 2, 1, 2", len(r.KVM), len(r.Arm), len(steps))
	}
	for i, p := range r.KVM {
		if p.RAMBytes != 64<<20 || p.Pages != []int{1, 100}[i] {
			t.Errorf("row %d: %s, %d pages", i, fmtBytes(p.RAMBytes), p.Pages)
		}
		if p.RestoreNsMedian <= 0 || p.RestoreNsP90 < p.RestoreNsMedian || p.HarvestNs <= 0 || p.CopyNs <= 0 || p.StateNs <= 0 {
			t.Errorf("row %d: times %+v", i, p)
		}
		if p.PagesCopied < p.Pages {
			t.Errorf("row %d: %d pages copied, want at least %d", i, p.PagesCopied, p.Pages)
		}
	}
	if a := r.Arm[0]; a.ArmNs <= 0 || a.ArmBytes <= 0 || a.ArmBytes > 64<<20 {
		t.Errorf("arm %+v", a)
	}
	if !r.Fit.Fitted || r.Fit.FitRAMBytes != 64<<20 || r.Fit.RAMRatio != 0 {
		t.Errorf("fit %+v: want fitted at 64 MiB, no RAM ratio", r.Fit)
	}
	if r.TargetMet || r.Target.FlatInRAM {
		t.Errorf("target %+v met with one RAM size", r.Target)
	}
	if r.QEMU != nil || r.Baseline != nil {
		t.Errorf("qemu %+v, baseline %+v: not asked for", r.QEMU, r.Baseline)
	}
	var got themisv1.BenchRestoreReport
	b := roundTrip(t, r.Proto(), &got)
	for _, k := range []string{`"schema":"themis.v1.BenchRestoreReport"`, `"kvm":[{"ram_bytes":"67108864","pages":1,"restore_median_s":`, `"arm":[{"ram_bytes":"67108864","arm_s":`, `"fit":{"per_page_s":`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("json lacks %s:\n%s", k, b)
		}
	}
	if k := got.GetKvm(); len(k) != 2 || k[1].GetPages() != 100 || k[1].GetRestoreMedianS() != float64(r.KVM[1].RestoreNsMedian)/1e9 ||
		got.GetQemu() != nil || got.GetBaseline() != nil || got.GetTargetMet() || got.GetMeasuredAt().AsTime().IsZero() {
		t.Errorf("decoded %v", &got)
	}
	t.Logf("\n%s", r)
}
