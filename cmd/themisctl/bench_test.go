package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/themisfs/themis/internal/kvmtest"
)

// TestBenchRestore runs `bench restore --json` with the KVM part only and
// tiny settings, and checks its flags' errors.
func TestBenchRestore(t *testing.T) {
	bin := themisctl(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "restore", "--ram", "12X"}, "--ram"},
		{[]string{"bench", "restore", "--iterations", "0"}, "--iterations 0"},
		{[]string{"bench", "restore", "--pages", "0"}, "0 pages"},
	} {
		out, err := exec.Command(bin, tt.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("themisctl %v: %v\n%s\nwant an error mentioning %q", tt.args, err, out, tt.want)
		}
	}

	kvmtest.Need(t)
	cmd := exec.Command(bin, "--json", "bench", "restore", "--ram", "64M", "--pages", "1,100", "--iterations", "3", "--qemu=false", "--baseline=false")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench restore: %v\n%s", err, stderr.String())
	}
	var r struct {
		KVM []struct {
			RAMBytes        int64 `json:"ram_bytes"`
			Pages           int   `json:"pages"`
			RestoreNsMedian int64 `json:"restore_ns_median"`
		} `json:"kvm"`
		Arm       []map[string]any `json:"arm"`
		Fit       map[string]any   `json:"fit"`
		QEMU      any              `json:"qemu"`
		Baseline  any              `json:"baseline"`
		TargetMet *bool            `json:"target_met"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bench restore --json is not JSON: %v\n%s", err, out)
	}
	if len(r.KVM) != 2 || r.KVM[0].RAMBytes != 64<<20 || r.KVM[1].Pages != 100 || r.KVM[1].RestoreNsMedian <= 0 {
		t.Errorf("kvm rows %+v", r.KVM)
	}
	if len(r.Arm) != 1 || r.Fit["per_page_ns"] == nil || r.QEMU != nil || r.Baseline != nil || r.TargetMet == nil {
		t.Errorf("json %s", out)
	}
	if !strings.Contains(stderr.String(), "==> kvm: 64 MiB RAM, 100 dirtied pages") {
		t.Errorf("stderr lacks the progress lines:\n%s", stderr.String())
	}
}

// TestBenchChannelFlags: `bench channel` refuses counts below one before
// it boots anything (bench's TestChannel measures on a real guest).
func TestBenchChannelFlags(t *testing.T) {
	bin := themisctl(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "channel", "--iterations", "0"}, "--iterations 0"},
		{[]string{"bench", "channel", "--files", "-1"}, "--files -1"},
	} {
		out, err := exec.Command(bin, tt.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("themisctl %v: %v\n%s\nwant an error mentioning %q", tt.args, err, out, tt.want)
		}
	}
}

// TestBenchEcho runs `bench echo --json` with tiny settings and
// checks its flags' errors.
func TestBenchEcho(t *testing.T) {
	bin := themisctl(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "echo", "--sizes", "12X"}, "--sizes"},
		{[]string{"bench", "echo", "--messages", "0"}, "--messages 0"},
		{[]string{"bench", "echo", "--sizes", "12K"}, "12288 bytes"},
	} {
		out, err := exec.Command(bin, tt.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("themisctl %v: %v\n%s\nwant an error mentioning %q", tt.args, err, out, tt.want)
		}
	}

	kvmtest.Need(t)
	cmd := exec.Command(bin, "--json", "bench", "echo", "--sizes", "1K", "--messages", "5", "--uart-messages", "1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench echo: %v\n%s", err, stderr.String())
	}
	var r struct {
		KVMSynthetic []struct {
			Size int `json:"size"`
			UART struct {
				Messages     int     `json:"messages"`
				ExitsPerEcho float64 `json:"exits_per_echo"`
			} `json:"uart"`
			Console struct {
				Channel      string  `json:"channel"`
				ExitsPerEcho float64 `json:"exits_per_echo"`
				NsPerEcho    float64 `json:"ns_per_echo"`
			} `json:"console"`
		} `json:"kvm_synthetic"`
		TargetMet *bool `json:"target_met"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bench echo --json is not JSON: %v\n%s", err, out)
	}
	if len(r.KVMSynthetic) != 1 || r.KVMSynthetic[0].Size != 1024 || r.KVMSynthetic[0].UART.Messages != 1 ||
		r.KVMSynthetic[0].Console.Channel != "virtio-console" || r.KVMSynthetic[0].Console.NsPerEcho <= 0 || r.TargetMet == nil {
		t.Errorf("json %s", out)
	}
	if !strings.Contains(stderr.String(), "==> kvm-synthetic: virtio-console, 1 KiB messages, 5 round trips") {
		t.Errorf("stderr lacks the progress lines:\n%s", stderr.String())
	}
}
