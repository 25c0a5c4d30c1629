package clocksweep

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

func TestClockSweepOptionsRejected(t *testing.T) {
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		o     Options
		field string
	}{
		{"no lanes", Options{}, "lanes"},
		{"fs without a clock rule", Options{Lanes: []string{"overlay"}}, "lanes"},
		{"unknown op", Options{Lanes: []string{"ext2"}, Ops: []string{"fly"}}, "ops"},
		{"shard 4/3", Options{Lanes: []string{"ext2"}, Shard: 4, Shards: 3}, "shard"},
		{"shard -1", Options{Lanes: []string{"ext2"}, Shard: -1, Shards: 2}, "shard"},
		{"bad plan", Options{Lanes: []string{"ext2"}, Plan: clock.Plan{Name: "x"}}, "plan"},
		{"bad value", Options{Lanes: []string{"ext2"}, Plan: clock.Plan{Values: []clock.Value{{Name: "a", Nsec: -1}}}}, "plan"},
		{"backend", Options{Lanes: []string{"ext2"}, Backend: "xen"}, "backend"},
	} {
		_, err := Run(ctx, m, c.o, nil)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) {
			t.Errorf("%s: err = %v, want a errkind.FieldError on %s", c.name, err, c.field)
		}
	}
	if st := m.Stats(); st.Created != 0 {
		t.Errorf("bad options created %d sessions", st.Created)
	}
}

func TestClockSweepDefaults(t *testing.T) {
	o := Options{Lanes: []string{"ext2", "vfat"}}
	_, plan, err := validate(&o)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Values) != len(clock.DefaultPlan().Values) || strings.Join(o.Ops, ",") != strings.Join(clock.Ops(), ",") || o.Shards != 1 {
		t.Errorf("defaults: %d values, ops %v, shards %d", len(plan.Values), o.Ops, o.Shards)
	}
	o = Options{Lanes: []string{"ext2"}, Shard: 1, Shards: 3}
	if _, plan, err = validate(&o); err != nil || plan.Values[0].Name != clock.DefaultPlan().Values[1].Name {
		t.Errorf("shard 1/3: %v %v", plan.Values, err)
	}
}

// TestOpTargets: each op reads its timestamp where it sets it and
// prepares what it needs: the directory entry op reads the directory it
// created its file in (made at the root's clock), truncate and the rest
// read the prepared file, create and mkdir make their own.
func TestOpTargets(t *testing.T) {
	for _, tc := range []struct {
		op, target, prepared string // prepared: the path made before the op ("" none)
	}{
		{clock.OpCreate, sweepFile, ""},
		{clock.OpMkdir, sweepFile, ""},
		{clock.OpRename, sweepFile + ".r", sweepFile},
		{clock.OpTruncate, sweepFile, sweepFile},
		{clock.OpDirEntry, sweepDir, sweepDir},
	} {
		if got := target(tc.op); got != tc.target {
			t.Errorf("%s: target %q, want %q", tc.op, got, tc.target)
		}
		req := prepare(tc.op, "l")
		got := ""
		switch o := req.GetOp().(type) {
		case *agentv1.Request_Write:
			got = o.Write.GetPath()
		case *agentv1.Request_Mkdir:
			got = o.Mkdir.GetPath()
		}
		if got != tc.prepared {
			t.Errorf("%s: prepared %q (%v), want %q", tc.op, got, req, tc.prepared)
		}
		if c, ok := opReq(tc.op, "l", clock.Timespec{}).GetOp().(*agentv1.Request_Create); ok && tc.op == clock.OpDirEntry && path.Dir(c.Create.GetPath()) != sweepDir {
			t.Errorf("%s: creates %q, not in %q", tc.op, c.Create.GetPath(), sweepDir)
		}
	}
}
