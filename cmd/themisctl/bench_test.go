package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
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
	var r themisv1.BenchRestoreReport
	if err := jsonout.DecodeInto(out, &r); err != nil {
		t.Fatalf("bench restore --json: %v\n%s", err, out)
	}
	if k := r.GetKvm(); len(k) != 2 || k[0].GetRamBytes() != 64<<20 || k[1].GetPages() != 100 || k[1].GetRestoreMedianS() <= 0 {
		t.Errorf("kvm rows %v", k)
	}
	if len(r.GetArm()) != 1 || !r.GetFit().GetFitted() || r.GetQemu() != nil || r.GetBaseline() != nil || r.GetIterations() != 3 {
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
	var r themisv1.BenchEchoReport
	if err := jsonout.DecodeInto(out, &r); err != nil {
		t.Fatalf("bench echo --json: %v\n%s", err, out)
	}
	if p := r.GetKvmSynthetic(); len(p) != 1 || p[0].GetSize() != 1024 || p[0].GetUart().GetMessages() != 1 ||
		p[0].GetConsole().GetChannel() != "virtio-console" || p[0].GetConsole().GetPerEchoS() <= 0 || r.GetTargetExitsPerMessage() == 0 {
		t.Errorf("json %s", out)
	}
	if !strings.Contains(stderr.String(), "==> kvm-synthetic: virtio-console, 1 KiB messages, 5 round trips") {
		t.Errorf("stderr lacks the progress lines:\n%s", stderr.String())
	}
}
