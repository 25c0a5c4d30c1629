package faultagent

import (
	"os"
	"path/filepath"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TestCrashOn: a mkdir the CrashOn names, alone or in a batch, writes "c"
// to the sysrq trigger before it is served; another mkdir, another op or
// no CrashOn writes nothing.
func TestCrashOn(t *testing.T) {
	mkdir := func(p string) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: lane, Path: p, Mode: 0o755}}}
	}
	batch := func(rs ...*agentv1.Request) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: rs}}}
	}
	cases := []struct {
		name  string
		on    CrashOn
		req   *agentv1.Request
		crash bool
	}{
		{"the path", "mkdir:d-01", mkdir("d-01"), true},
		{"in a batch", "mkdir:d-01", batch(mkdir("d-01"), fingerprint()), true},
		{"another path", "mkdir:d-01", mkdir("d-00"), false},
		{"every mkdir", "mkdir", batch(mkdir("d-00/d-01")), true},
		{"another op", "mkdir", stat("d-01"), false},
		{"off", "", mkdir("d-01"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trigger := filepath.Join(t.TempDir(), "sysrq-trigger")
			if err := os.WriteFile(trigger, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			c, _ := serve(t, Options{CrashOn: tc.on, SysrqTrigger: trigger})
			if _, err := call(t, c, tc.req); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(trigger)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b) == "c"; got != tc.crash || (!tc.crash && len(b) != 0) {
				t.Errorf("trigger holds %q, want a crash %v", b, tc.crash)
			}
		})
	}
	if err := CrashOn("rmdir").Check(); err == nil {
		t.Error(`CrashOn("rmdir").Check() = nil, want an error`)
	}
}
