package session

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/kreport"
)

// TestKernelFindingStored: a kernel finding's report comes back from the
// ledger as stored; other findings have none.
func TestKernelFindingStored(t *testing.T) {
	ctx := context.Background()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	rep := &kreport.Report{Kind: kreport.Panic, Title: "Kernel panic - not syncing: sysrq triggered crash", Panic: "sysrq triggered crash",
		Trace: []string{"panic+0x118/0x2ed", "sysrq_handle_crash+0x16/0x20"}, Text: "Kernel panic - not syncing: sysrq triggered crash\nCall Trace:"}
	now := time.Now().UTC()
	for _, f := range []*Finding{
		{ID: "f-k", Session: "s-1", Kind: KindKernel, Trace: []string{"mkdir d-00 0755"}, Kernel: rep, Created: now},
		{ID: "f-e", Session: "s-1", Kind: "errno-divergence", Created: now},
	} {
		if err := l.insertFinding(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	k, err := l.finding(ctx, "f-k")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(k.Kernel, rep) {
		t.Errorf("kernel report back as %+v, want %+v", k.Kernel, rep)
	}
	e, err := l.finding(ctx, "f-e")
	if err != nil || e.Kernel != nil {
		t.Errorf("errno finding: kernel %+v, %v", e.Kernel, err)
	}
}
