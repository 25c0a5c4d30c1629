package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestChannel runs Channel on real guests with a few iterations and checks
// the report's shape, not its speed.
func TestChannel(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := Channel(ctx, ChannelOptions{CacheDir: env.CacheDir, Iterations: 2, Files: 3, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped != "" || r.UART.Path != "/dev/ttyS1" || !strings.HasPrefix(r.Virtio.Path, "/dev/vport") || r.UART.BootNs <= 0 || r.Virtio.BootNs <= 0 {
		t.Fatalf("report %+v", r)
	}
	if len(r.Rows) != 2*len(ChannelOps) {
		t.Fatalf("%d rows, want %d", len(r.Rows), 2*len(ChannelOps))
	}
	for i, row := range r.Rows {
		wantPhase := PhaseBoot
		if i >= len(ChannelOps) {
			wantPhase = PhaseRestore
		}
		if row.Op != ChannelOps[i%len(ChannelOps)] || row.Phase != wantPhase || row.UART.NsMedian <= 0 || row.Virtio.NsMedian <= 0 ||
			row.UART.NsP90 < row.UART.NsMedian || row.UARTOverVirtio <= 0 || row.RequestBytes <= 0 {
			t.Errorf("row %d: %+v", i, row)
		}
	}
	if rs := r.Restore; rs.Op != "restore" || rs.UART.NsMedian <= 0 || rs.Virtio.NsMedian <= 0 {
		t.Errorf("restore row %+v", rs)
	}
	// The fingerprint names the root, the three files and w (written after
	// the checkpoint: only in the boot phase).
	fp := r.Rows[slices.Index(ChannelOps, "fingerprint")]
	if fp.ResponseBytes < 3*20 {
		t.Errorf("fingerprint reply of %d bytes", fp.ResponseBytes)
	}
	if s := r.String(); !strings.Contains(s, "UART / VIRTIO") || !strings.Contains(s, "write-16k") {
		t.Errorf("String:\n%s", s)
	}
	var got themisv1.BenchChannelReport
	roundTrip(t, r.Proto(), &got)
	if rows := got.GetRows(); len(rows) != len(r.Rows) || rows[0].GetUart().GetMedianS() != float64(r.Rows[0].UART.NsMedian)/1e9 ||
		got.GetUart().GetPath() != "/dev/ttyS1" || got.GetRestore().GetOp() != "restore" {
		t.Errorf("--json: %v", &got)
	}
}

func TestChannelOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []ChannelOptions{{Iterations: -1}, {Iterations: MaxChannelIterations + 1}, {Files: -2}, {Files: MaxChannelFiles + 1}} {
		if _, err := Channel(context.Background(), o); err == nil {
			t.Errorf("Channel(%+v): no error", o)
		}
	}
	o := ChannelOptions{}
	if err := o.normalize(); err != nil || o.Iterations != DefaultChannelIterations || o.Files != DefaultChannelFiles {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}
