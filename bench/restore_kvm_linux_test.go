package bench

import (
	"encoding/json"
	"strings"
	"testing"

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
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"kvm":[{"ram_bytes":67108864,"pages":1,"restore_ns_median":`, `"arm":[{"ram_bytes":67108864,"arm_ns":`, `"fit":{"per_page_ns":`, `"qemu":null`, `"baseline":null`, `"target_met":false`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("json lacks %s:\n%s", k, b)
		}
	}
	t.Logf("\n%s", r)
}
