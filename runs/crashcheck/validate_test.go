package crashcheck

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/errkind"
)

// TestValidate: bad options are a FieldError naming the field; a workload
// brings its setup and every trace of it parses.
func TestValidate(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxTraceOps+1)
	for i := range many {
		many[i] = "sync"
	}
	for _, tt := range []struct {
		name  string
		o     Options
		field string
	}{
		{"no lanes", Options{Trace: []string{"sync"}}, "lanes"},
		{"no host fsck", Options{Lanes: []string{"ext2", "vfat"}, Trace: []string{"sync"}}, "lanes[1]"},
		{"neither", Options{Lanes: []string{"ext2"}}, "trace"},
		{"both", Options{Lanes: []string{"ext2"}, Trace: []string{"sync"}, Workload: "ace:seq1"}, "workload"},
		{"unknown workload", Options{Lanes: []string{"ext2"}, Workload: "ace:seq3"}, "workload"},
		{"bad op", Options{Lanes: []string{"ext2"}, Trace: []string{"sync", "frob f"}}, "trace (workload 0)[1]"},
		{"bad path", Options{Lanes: []string{"ext2"}, Trace: []string{"unlink ../x"}}, "trace (workload 0)[0]"},
		{"too long", Options{Lanes: []string{"ext2"}, Trace: many}, "trace (workload 0)"},
		{"bad setup", Options{Lanes: []string{"ext2"}, Setup: []string{"mkdir"}, Trace: []string{"sync"}}, "setup[0]"},
		{"crash bounds", Options{Lanes: []string{"ext2"}, Trace: []string{"sync"}, Crash: crash.Options{MaxSubset: 9}}, "crash"},
		{"minimize", Options{Lanes: []string{"ext2"}, Trace: []string{"sync"}, Minimize: MaxMinimize + 1}, "minimize"},
		{"only of a workload", Options{Lanes: []string{"ext2"}, Workload: "ace:seq1", Only: []int{}}, "only"},
		{"image without only", Options{Lanes: []string{"ext2"}, Trace: []string{"sync"}, StreamImage: true}, "stream_image"},
		{"atomic on the host", Options{Lanes: []string{"ext2"}, Trace: []string{"sync"}, Atomic: true, HostReplay: true}, "atomic"},
	} {
		_, err := validate(&tt.o)
		var fe *errkind.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: %v, want a FieldError on %q", tt.name, err, tt.field)
		}
	}
	o := Options{Lanes: []string{"ext2"}, Workload: "ace:seq1", MaxWorkloads: 5}
	p, err := validate(&o)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.traces) != 5 || !p.truncated || !slices.Equal(o.Setup, crash.AceSetup) || len(p.ops) != 5 {
		t.Errorf("ace:seq1 max 5: %d traces (truncated %v), setup %q", len(p.traces), p.truncated, o.Setup)
	}
	all := Options{Lanes: []string{"ext2"}, Workload: "ace:seq1"}
	if p, err := validate(&all); err != nil || p.truncated || len(p.ops) < 60 {
		t.Errorf("ace:seq1: %v; every trace must parse", err)
	} else if !strings.HasPrefix(crash.Describe(p.traces[0]), "create bar") {
		t.Errorf("first workload %s", crash.Describe(p.traces[0]))
	}
}
