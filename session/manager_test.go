package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
	"go.uber.org/zap/zaptest"
)

func TestBadInputs(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	ctx := context.Background()
	in, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2", "ext2:name=b"}})
	if err != nil {
		t.Fatal(err)
	}
	sid := in.ID
	mk := func(path string) *agentv1.Request {
		return &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Path: path}}}
	}
	cases := []struct {
		name  string
		call  func() error
		kind  error
		field string
	}{
		{"no lanes", func() error { _, err := m.Create(ctx, session.CreateOptions{}); return err }, errkind.ErrInvalid, "lanes"},
		{"bad lane", func() error {
			_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2", "zfs"}})
			return err
		}, errkind.ErrInvalid, "lanes[1]"},
		{"dup lane", func() error {
			_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2", "ext2"}})
			return err
		}, errkind.ErrInvalid, "lanes[1]"},
		{"memory", func() error {
			_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, MemoryMiB: 32})
			return err
		}, errkind.ErrInvalid, "memory_mib"},
		{"restore", func() error {
			_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, Restore: "half"})
			return err
		}, errkind.ErrInvalid, "restore_mode"},
		{"backend", func() error {
			_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, Backend: "kvm2"})
			return err
		}, errkind.ErrInvalid, "backend"},
		{"icount on kvm", func() error {
			_, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, Backend: "kvm", ICount: true})
			return err
		}, errkind.ErrInvalid, "icount"},
		{"empty session", func() error { _, err := m.Apply(ctx, "", mk("d")); return err }, errkind.ErrInvalid, "session_id"},
		{"unknown session", func() error { _, err := m.Apply(ctx, "s-nope", mk("d")); return err }, errkind.ErrNotFound, ""},
		{"unknown session get", func() error { _, err := m.Get(ctx, "s-nope"); return err }, errkind.ErrNotFound, ""},
		{"unknown session delete", func() error { return m.Delete(ctx, "s-nope") }, errkind.ErrNotFound, ""},
		{"nil op", func() error { _, err := m.Apply(ctx, sid, nil); return err }, errkind.ErrInvalid, "op"},
		{"empty op", func() error { _, err := m.Apply(ctx, sid, &agentv1.Request{}); return err }, errkind.ErrInvalid, "op"},
		{"not an apply op", func() error {
			_, err := m.Apply(ctx, sid, &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
			return err
		}, errkind.ErrInvalid, "op"},
		{"absolute path", func() error { _, err := m.Apply(ctx, sid, mk("/etc")); return err }, errkind.ErrInvalid, "op.mkdir.path"},
		{"dotdot", func() error { _, err := m.Apply(ctx, sid, mk("a/../../b")); return err }, errkind.ErrInvalid, "op.mkdir.path"},
		{"nul", func() error { _, err := m.Apply(ctx, sid, mk("a\x00b")); return err }, errkind.ErrInvalid, "op.mkdir.path"},
		{"long", func() error { _, err := m.Apply(ctx, sid, mk(strings.Repeat("a", 4097))); return err }, errkind.ErrInvalid, "op.mkdir.path"},
		{"rename new_path", func() error {
			_, err := m.Apply(ctx, sid, &agentv1.Request{Op: &agentv1.Request_Rename{Rename: &agentv1.Rename{Path: "a", NewPath: "../x"}}})
			return err
		}, errkind.ErrInvalid, "op.rename.new_path"},
		{"write size", func() error {
			_, err := m.Apply(ctx, sid, &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: "f", Size: 64<<20 + 1}}})
			return err
		}, errkind.ErrInvalid, "op.write.size"},
		{"write offset", func() error {
			_, err := m.Apply(ctx, sid, &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: "f", Offset: -1}}})
			return err
		}, errkind.ErrInvalid, "op.write.offset"},
		{"read length", func() error { _, _, _, err := m.ReadFile(ctx, sid, "ext2", "f", 0, 2<<20); return err }, errkind.ErrInvalid, "length"},
		{"read offset", func() error { _, _, _, err := m.ReadFile(ctx, sid, "ext2", "f", -1, 0); return err }, errkind.ErrInvalid, "offset"},
		{"read lane", func() error { _, _, _, err := m.ReadFile(ctx, sid, "zz", "f", 0, 0); return err }, errkind.ErrInvalid, "lane"},
		{"stat path", func() error { _, _, err := m.Stat(ctx, sid, "ext2", "../f", false); return err }, errkind.ErrInvalid, "path"},
		{"fingerprint lane", func() error {
			_, err := m.Fingerprint(ctx, sid, agentv1.TimeMode_TIME_MODE_ALL, false, []string{"ext2", "q"})
			return err
		}, errkind.ErrInvalid, "lanes[1]"},
		{"fork origin", func() error { _, err := m.Fork(ctx, sid, "", "sometimes"); return err }, errkind.ErrInvalid, "origin"},
		{"fork id-like name", func() error { _, err := m.Fork(ctx, sid, "c-7", session.OriginManual); return err }, errkind.ErrInvalid, "name"},
		{"restore unknown", func() error { _, _, err := m.Restore(ctx, sid, "c-99"); return err }, errkind.ErrNotFound, ""},
		{"restore empty", func() error { _, _, err := m.Restore(ctx, sid, ""); return err }, errkind.ErrInvalid, "checkpoint"},
		{"restorefile path", func() error { _, _, err := m.RestoreFile(ctx, sid, "c-1", "ext2", "/abs"); return err }, errkind.ErrInvalid, "path"},
		{"events limit", func() error { _, err := m.Events(ctx, sid, 0, 5000); return err }, errkind.ErrInvalid, "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { sessiontest.WantErr(t, c.call(), c.kind, c.field) })
	}
	// The valid forms go through, with one result per lane.
	res, err := m.Apply(ctx, sid, mk("d"))
	if err != nil || len(res) != 2 || res[0].Lane != "ext2" || res[1].Lane != "b" {
		t.Fatalf("apply: %v %+v", err, res)
	}
	if _, err := m.Fork(ctx, sid, "one", session.OriginManual); err != nil {
		t.Fatal(err)
	}
	_, err = m.Fork(ctx, sid, "one", session.OriginManual)
	sessiontest.WantErr(t, err, errkind.ErrInvalid, "name")
}

func TestLimitsPoolsAndRestart(t *testing.T) {
	dir := t.TempDir()
	m, machines := sessiontest.NewManager(t, dir, session.Config{MaxSessions: 2, MaxMemoryMiB: 300, ManualCheckpoints: 2, AutoCheckpoints: 2}, nil)
	ctx := context.Background()
	a, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, MemoryMiB: 256})
	sessiontest.WantErr(t, err, errkind.ErrExhausted, "")
	if !strings.Contains(err.Error(), "300") {
		t.Errorf("memory error %q does not name the limit", err)
	}
	b, err := m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Create(ctx, session.CreateOptions{Lanes: []string{"ext2"}, MemoryMiB: 64})
	sessiontest.WantErr(t, err, errkind.ErrExhausted, "")

	// Manual pool.
	for range 2 {
		if _, err := m.Fork(ctx, a.ID, "", session.OriginManual); err != nil {
			t.Fatal(err)
		}
	}
	_, err = m.Fork(ctx, a.ID, "", session.OriginManual)
	sessiontest.WantErr(t, err, errkind.ErrExhausted, "")
	if !strings.Contains(err.Error(), "manual checkpoint pool full (2)") {
		t.Errorf("pool error %q", err)
	}
	// Auto ring: c-3, c-4, then c-5 evicts c-3.
	for range 3 {
		if _, err := m.Fork(ctx, a.ID, "", session.OriginAuto); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := m.Checkpoints(ctx, a.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cps {
		ids = append(ids, c.ID+"/"+c.Parent)
	}
	if got, want := strings.Join(ids, " "), "c-1/ c-2/c-1 c-4/c-2 c-5/c-4"; got != want {
		t.Errorf("live checkpoints %q, want %q", got, want)
	}
	if got := machines.At(0).Checkpoints(); len(got) != 4 {
		t.Errorf("machine path %v, want 4 checkpoints", got)
	}
	// Restore to c-2 drops c-4 and c-5; restoring c-5 then is errkind.ErrState.
	if _, _, err := m.Restore(ctx, a.ID, "c-2"); err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Restore(ctx, a.ID, "c-5")
	sessiontest.WantErr(t, err, errkind.ErrState, "")
	if err := m.DeleteCheckpoint(ctx, a.ID, "c-1"); err != nil {
		t.Fatal(err)
	}
	if in, _ := m.Get(ctx, a.ID); in.Depth != 1 {
		t.Errorf("depth %d, want 1", in.Depth)
	}

	// A guest that dies fails its session; later calls are errkind.ErrState.
	machines.At(1).(*sessiontest.Machine).Kill()
	_, err = m.Apply(ctx, b.ID, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	sessiontest.WantErr(t, err, vmm.ErrGuestDied, "")
	_, err = m.Apply(ctx, b.ID, &agentv1.Request{Op: &agentv1.Request_Sync{Sync: &agentv1.Sync{}}})
	sessiontest.WantErr(t, err, errkind.ErrState, "")
	if in, _ := m.Get(ctx, b.ID); in.State != session.StateFailed {
		t.Errorf("state %s, want failed", in.State)
	}
	if s := m.Stats(); s.Running != 1 || s.Failures != 1 || s.Restores != 1 {
		t.Errorf("stats %+v", s)
	}

	// Restart: a new session.Manager on the same state dir (without closing the
	// first: a crashed daemon) sees a as ended, with its record.
	m2, _ := sessiontest.NewManager(t, dir, session.Config{}, nil)
	in, err := m2.Get(ctx, a.ID)
	if err != nil || in.State != session.StateEnded || in.Reason != "daemon restarted" {
		t.Fatalf("after restart: %+v, %v", in, err)
	}
	all, err := m2.Checkpoints(ctx, a.ID, true)
	if err != nil || len(all) != 5 {
		t.Fatalf("checkpoints after restart: %d, %v", len(all), err)
	}
	evs, err := m2.Events(ctx, a.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	for _, k := range []string{"session.created", "fork", "checkpoint.evicted", "restore", "checkpoint.deleted", "session.ended"} {
		if !strings.Contains(strings.Join(kinds, ","), k) {
			t.Errorf("events %v lack %s", kinds, k)
		}
	}
	list, err := m2.List(ctx, true)
	if err != nil || len(list) != 2 {
		t.Errorf("list all: %d, %v", len(list), err)
	}
}

// TestBackendKVMNeedsHardware: without a Start double the session boots by
// its backend; asking for kvm on a host whose /dev/kvm cannot boot Linux
// is refused at the API edge, naming the field and the reason.
func TestBackendKVMNeedsHardware(t *testing.T) {
	if ok, _ := kvm.HardwareVirtualization(); ok {
		t.Skip("this host has hardware virtualization")
	}
	m, err := session.Open(context.Background(), session.Config{MakeBase: baseimage.Make, StateDir: t.TempDir(), CacheDir: t.TempDir(), Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Create(context.Background(), session.CreateOptions{Lanes: []string{"ext2"}, Backend: "kvm"})
	sessiontest.WantErr(t, err, errkind.ErrInvalid, "backend")
	if !strings.Contains(err.Error(), "hardware virtualization") && !strings.Contains(err.Error(), "vmx") {
		t.Errorf("the error does not say why: %v", err)
	}
}

// TestOpenNeedsConfig: a Config missing a required field is refused by
// name.
func TestOpenNeedsConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  session.Config
		want string
	}{
		{session.Config{MakeBase: baseimage.Make}, "Config.StateDir"},
		{session.Config{StateDir: t.TempDir()}, "Config.MakeBase"},
		{session.Config{StateDir: t.TempDir(), MakeBase: baseimage.Make, AgentChannel: "pipe"}, "Config.AgentChannel"},
		{session.Config{StateDir: t.TempDir(), MakeBase: baseimage.Make, CallTimeout: -time.Second}, "Config.CallTimeout"},
		{session.Config{StateDir: t.TempDir(), MakeBase: baseimage.Make, CallTimeout: 2 * time.Hour}, "Config.CallTimeout"},
	} {
		m, err := session.Open(context.Background(), tt.cfg)
		if err == nil {
			m.Close()
			t.Errorf("Open without %s succeeded", tt.want)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open: %v, want it to name %s", err, tt.want)
		}
	}
}

// TestCheckImage: "" is the stock image; a name that is no image of the
// cache is a FieldError on "image", as Create gives.
func TestCheckImage(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	if err := m.CheckImage(""); err != nil {
		t.Errorf("CheckImage(\"\") = %v", err)
	}
	var fe *errkind.FieldError
	if err := m.CheckImage("no-such-image"); !errors.As(err, &fe) || fe.Field != "image" {
		t.Errorf("CheckImage(no-such-image) = %v, want a FieldError on image", err)
	}
}
