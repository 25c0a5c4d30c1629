package doctor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

func TestPickBackend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind     string
		qemu     bool
		want     string
		whyMatch string
	}{
		{"hardware", true, "kvm", "hardware virtualization"},
		{"hardware", false, "kvm", "Go KVM backend"},
		{"pvm", true, "qemu", "not hardware virtualization"},
		{"absent", true, "qemu", "no /dev/kvm"},
		{"absent", false, "none", "install qemu-system-x86"},
		{"pvm", false, "none", "install qemu-system-x86"},
	}
	for _, tt := range tests {
		got, why := PickBackend(tt.kind, tt.qemu)
		if got != tt.want || !strings.Contains(why, tt.whyMatch) {
			t.Errorf("PickBackend(%q, %v) = %q, %q; want %q, mentioning %q", tt.kind, tt.qemu, got, why, tt.want, tt.whyMatch)
		}
	}
}

// TestBootCheck runs doctor --boot's measurement on the real guest and
// checks the JSON a script would read.
func TestBootCheck(t *testing.T) {
	env := vmmtest.Setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := Check(ctx, env.CacheDir)
	b, err := BootCheck(ctx, BootOptions{
		Guest:    guest.Options{CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)},
		Pings:    20,
		Restores: 3,
		Log:      zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Boot = b
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"backend", "boot_ms", "agent_rtt_us", "checkpoint_ms", "restore_ms", "restore_verified", "y2038_set", "y2038_stored"} {
		if _, ok := got[key]; !ok {
			t.Errorf("doctor JSON lacks %q: %s", key, raw)
		}
	}
	if got["restore_verified"] != true {
		t.Errorf("restore_verified = %v", got["restore_verified"])
	}
	if b.Y2038Stored != 1<<31-1 || b.Y2038OnDisk != 1<<31-1 {
		t.Errorf("Y2038 witness: set %d, guest %d, on disk %d; want both clamped to %d", b.Y2038Set, b.Y2038Stored, b.Y2038OnDisk, 1<<31-1)
	}
	if b.BootMs <= 0 || b.AgentRTTUs <= 0 || b.RestoreMs <= 0 {
		t.Errorf("timings not measured: %+v", b)
	}
}

func TestBootCheckBadBackend(t *testing.T) {
	t.Parallel()
	_, err := BootCheck(context.Background(), BootOptions{Backend: "bhyve"})
	if err == nil || !strings.Contains(err.Error(), `backend "bhyve"`) {
		t.Fatalf("BootCheck with an unknown backend: %v", err)
	}
}
