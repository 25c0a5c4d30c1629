package main

import (
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestCrashReproduced: a crash finding's replay reproduces it when the
// state is bad the same way: lost again, not clean again, or, for a state
// that lost the guest, the same death (a kernel crash: a report of the
// same signature).
func TestCrashReproduced(t *testing.T) {
	sysrq := &themisv1.KernelReport{Kind: "panic", Title: "Kernel panic - not syncing: sysrq triggered crash"}
	bug := &themisv1.KernelReport{Kind: "bug", Title: "kernel BUG at fs/ext2/super.c:42!", Rip: "ext2_fill_super+0x1c/0x90 [ext2]"}
	finding := func(verdict, durability string, k *themisv1.KernelReport) *themisv1.Finding {
		return &themisv1.Finding{Kind: "crash", Crash: &themisv1.CrashPoint{Verdict: verdict, Durability: durability}, Kernel: k}
	}
	cases := []struct {
		name string
		f    *themisv1.Finding
		res  *themisv1.CrashResult
		want bool
	}{
		{"dirty again", finding("dirty", "", nil), &themisv1.CrashResult{Verdict: "broken"}, true},
		{"clean now", finding("dirty", "", nil), &themisv1.CrashResult{Verdict: "clean"}, false},
		{"lost again", finding("clean", "LOST f", nil), &themisv1.CrashResult{Verdict: "clean", Durability: "LOST f: 0 bytes"}, true},
		{"kept now", finding("clean", "LOST f", nil), &themisv1.CrashResult{Verdict: "dirty", Durability: "kept"}, false},
		{"the same kernel crash", finding("kernel-crash", "", sysrq), &themisv1.CrashResult{Verdict: "kernel-crash", Kernel: sysrq}, true},
		{"another kernel crash", finding("kernel-crash", "", sysrq), &themisv1.CrashResult{Verdict: "kernel-crash", Kernel: bug}, false},
		{"no crash now", finding("kernel-crash", "", sysrq), &themisv1.CrashResult{Verdict: "dirty"}, false},
		{"hung again", finding("guest-hung", "", nil), &themisv1.CrashResult{Verdict: "guest-hung"}, true},
		{"crashed instead of hanging", finding("guest-hung", "", nil), &themisv1.CrashResult{Verdict: "kernel-crash", Kernel: bug}, false},
	}
	for _, tc := range cases {
		if got := crashReproduced(tc.f, tc.res); got != tc.want {
			t.Errorf("%s: reproduced %v, want %v", tc.name, got, tc.want)
		}
	}
}
