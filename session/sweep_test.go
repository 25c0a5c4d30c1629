package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/themisfs/themis/clock"
)

func TestClockSweepOptionsRejected(t *testing.T) {
	m, _ := fakeManager(t, t.TempDir(), Config{})
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		o     SweepOptions
		field string
	}{
		{"no lanes", SweepOptions{}, "lanes"},
		{"unknown fs", SweepOptions{Lanes: []string{"xfs"}}, "lanes"},
		{"unknown op", SweepOptions{Lanes: []string{"ext2"}, Ops: []string{"fly"}}, "ops"},
		{"shard 4/3", SweepOptions{Lanes: []string{"ext2"}, Shard: 4, Shards: 3}, "shard"},
		{"shard -1", SweepOptions{Lanes: []string{"ext2"}, Shard: -1, Shards: 2}, "shard"},
		{"bad plan", SweepOptions{Lanes: []string{"ext2"}, Plan: clock.Plan{Name: "x"}}, "plan"},
		{"bad value", SweepOptions{Lanes: []string{"ext2"}, Plan: clock.Plan{Values: []clock.Value{{Name: "a", Nsec: -1}}}}, "plan"},
		{"backend", SweepOptions{Lanes: []string{"ext2"}, Backend: "xen"}, "backend"},
	} {
		_, err := m.ClockSweep(ctx, c.o, nil)
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) {
			t.Errorf("%s: err = %v, want a FieldError on %s", c.name, err, c.field)
		}
	}
	if st := m.Stats(); st.Created != 0 {
		t.Errorf("bad options created %d sessions", st.Created)
	}
}

func TestClockSweepDefaults(t *testing.T) {
	o := SweepOptions{Lanes: []string{"ext2", "vfat"}}
	_, plan, err := validateSweep(&o)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Values) != len(clock.DefaultPlan().Values) || strings.Join(o.Ops, ",") != strings.Join(clock.Ops(), ",") || o.Shards != 1 {
		t.Errorf("defaults: %d values, ops %v, shards %d", len(plan.Values), o.Ops, o.Shards)
	}
	o = SweepOptions{Lanes: []string{"ext2"}, Shard: 1, Shards: 3}
	if _, plan, err = validateSweep(&o); err != nil || plan.Values[0].Name != clock.DefaultPlan().Values[1].Name {
		t.Errorf("shard 1/3: %v %v", plan.Values, err)
	}
}
