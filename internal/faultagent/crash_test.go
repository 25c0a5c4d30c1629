package faultagent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func mkdirReq(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: lane, Path: p, Mode: 0o755}}}
}

func mountReq(l string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: l}}}
}

func batchReq(rs ...*agentv1.Request) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: rs}}}
}

// TestCrashOn: a request a trigger names, alone or in a batch, writes "c"
// to the sysrq trigger (a mkdir or a mount before it is served; a mount
// whose answer is a failure, under mountfail: the test server refuses
// every mount, EPERM); another request, another lane or no CrashOn writes
// nothing.
func TestCrashOn(t *testing.T) {
	cases := []struct {
		name  string
		on    CrashOn
		req   *agentv1.Request
		crash bool
	}{
		{"the path", "mkdir:d-01", mkdirReq("d-01"), true},
		{"in a batch", "mkdir:d-01", batchReq(mkdirReq("d-01"), fingerprint()), true},
		{"another path", "mkdir:d-01", mkdirReq("d-00"), false},
		{"every mkdir", "mkdir", batchReq(mkdirReq("d-00/d-01")), true},
		{"another op", "mkdir", stat("d-01"), false},
		{"off", "", mkdirReq("d-01"), false},
		{"a mount of the lane", "mount:" + lane, mountReq(lane), true},
		{"a mount of another lane", "mount:crash:" + lane, mountReq(lane), false},
		{"a mount in a batch", "mkdir:x, mount:" + lane, batchReq(stat("f"), mountReq(lane)), true},
		{"a failed mount", "mountfail:" + lane, mountReq(lane), true},
		{"a failed mount of another lane", "mountfail:other", mountReq(lane), false},
		{"mountfail and no mount", "mountfail:" + lane, stat("f"), false},
		{"a freeze does not crash", "freeze:d-01", stat("f"), false},
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
}

// TestCrashOnFreeze: a freeze trigger names the lanes of the mkdirs it
// matches, to be frozen before they are served (the ioctl itself is the
// real guest's: freezing the host's filesystem in a unit test would hang
// the host's writers), and crashes nothing.
func TestCrashOnFreeze(t *testing.T) {
	cases := []struct {
		on   CrashOn
		req  *agentv1.Request
		want []string
	}{
		{"freeze", mkdirReq("a"), []string{lane}},
		{"freeze:a", batchReq(stat("f"), mkdirReq("a")), []string{lane}},
		{"freeze:a", mkdirReq("b"), nil},
		{"freeze", stat("a"), nil},
		{"mkdir", mkdirReq("a"), nil},
	}
	for _, tc := range cases {
		crash, freeze := tc.on.before(tc.req)
		if !slices.Equal(freeze, tc.want) || (crash && tc.on != "mkdir") {
			t.Errorf("%q before %v: crash %v, freeze %v: want freeze %v", tc.on, tc.req, crash, freeze, tc.want)
		}
	}
}

// TestCrashOnCheck: the triggers the agent knows pass, the others say so.
func TestCrashOnCheck(t *testing.T) {
	for _, c := range []CrashOn{"", "mkdir", "mkdir:d", "mount:crash:ext2", "mountfail:ext2", "freeze", "freeze:d", "mkdir:a,mount:crash:ext2"} {
		if err := c.Check(); err != nil {
			t.Errorf("%q: %v", c, err)
		}
	}
	for _, c := range []CrashOn{"rmdir", "mount", "mountfail", "mkdir,", "mount:", "freez"} {
		if err := c.Check(); err == nil {
			t.Errorf("%q: no error", c)
		}
	}
}
