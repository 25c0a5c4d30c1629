package export

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/repro"
	"github.com/themisfs/themis/session"
)

// FormatFSTests is Options.Format for a finding as an fstests test.
const FormatFSTests = "fstests"

// stateDetail is how explore words a state divergence (localize): the two
// lanes compared, where, the field and each one's value; a note may
// follow.
var stateDetail = regexp.MustCompile(`^lanes (\S+) and (\S+) differ at .*: (\S+) (\S+) != (\S+)(?: \(.*\))?$`)

// fstestsFiles writes finding f as the fstests test o.FSTestsTest, run as
// the lane o.FSTestsLane (a spec or a lane name; "" the first lane), its
// golden output the reference lane's result (an errno or state
// divergence) or the model's (repro.FSTestsFiles). Nothing runs: the test
// is made from the finding as stored.
func fstestsFiles(f *session.Finding, o Options) (repro.Files, error) {
	if o.FSTestsTest == "" {
		return nil, errkind.Invalid("fstests_test", "required with format %s", FormatFSTests)
	}
	i, err := fstestsLane(f, o.FSTestsLane)
	if err != nil {
		return nil, err
	}
	sp, err := guest.ParseLaneSpec(f.LaneSpecs[i])
	if err != nil {
		return nil, fmt.Errorf("finding %s: lane %q: %w", f.ID, f.LaneSpecs[i], err)
	}
	mkfs, err := baseimage.ShapeArgs(sp)
	if err != nil {
		return nil, fmt.Errorf("finding %s: %w", f.ID, err)
	}
	t := repro.FSTests{Name: o.FSTestsTest, Lane: repro.Lane{Spec: f.LaneSpecs[i], FS: sp.FS, SizeMiB: sp.SizeMiB, MountOptions: sp.MountOptions()},
		Finding: repro.Finding{ID: f.ID, Kind: f.Kind, Detail: f.Detail, Path: f.Path, Field: f.Field, Trace: f.Trace, Revert: f.Revert},
		Mkfs:    mkfs, Errno: laneErrno(f, sp.Name), Reference: "the model: what Themis checks of one lane", Version: version()}
	if err := fstestsExpect(f, sp.Name, &t); err != nil {
		return nil, err
	}
	if c := f.Crash; c != nil {
		t.Crash = &repro.FSTestsCrash{Setup: c.Setup, SetupSync: c.SetupSync, Kept: len(c.Keep), Writes: c.Writes, Flushes: c.Flushes,
			LogFlushes: c.LogFlushes, Lost: strings.HasPrefix(c.Durability, "LOST")}
	}
	files, err := repro.FSTestsFiles(t)
	if err != nil {
		return nil, errkind.Invalid("finding_id", "%v", err)
	}
	return files, nil
}

// fstestsExpect sets a differential finding's expectation: the last op's
// errno and, for a state divergence, the field's value, of the reference
// lane (the other lane of the two the finding compares, or the first
// whose errno differs from the lane under test's).
func fstestsExpect(f *session.Finding, lane string, t *repro.FSTests) error {
	switch f.Kind {
	case repro.KindErrno:
		for _, r := range f.Lanes {
			if r.Lane != lane && int(r.Errno) != t.Errno {
				t.Errno, t.Reference = int(r.Errno), "lane "+r.Lane
				return nil
			}
		}
		return errkind.Invalid("finding_id", "finding %s: no lane's errno differs from lane %s's", f.ID, lane)
	case repro.KindState:
		m := stateDetail.FindStringSubmatch(f.Detail)
		if m == nil || m[3] != f.Field {
			return errkind.Invalid("finding_id", "finding %s: its detail %q does not say each lane's %s", f.ID, f.Detail, f.Field)
		}
		switch lane {
		case m[1]:
			t.Value, t.Reference = m[5], "lane "+m[2]
		case m[2]:
			t.Value, t.Reference = m[4], "lane "+m[1]
		default:
			return errkind.Invalid("fstests_lane", "finding %s compares lanes %s and %s: export it as one of them", f.ID, m[1], m[2])
		}
		t.Errno = laneErrno(f, t.Reference[len("lane "):])
	}
	return nil
}

// fstestsLane is the index of the lane of f named by want (a spec or a
// lane name; "" the first).
func fstestsLane(f *session.Finding, want string) (int, error) {
	if len(f.LaneSpecs) == 0 {
		return 0, fmt.Errorf("finding %s has no lanes", f.ID)
	}
	if want == "" {
		return 0, nil
	}
	if i := slices.Index(f.LaneSpecs, want); i >= 0 {
		return i, nil
	}
	for i, s := range f.LaneSpecs {
		if sp, err := guest.ParseLaneSpec(s); err == nil && sp.Name == want {
			return i, nil
		}
	}
	return 0, errkind.Invalid("fstests_lane", "%q is not a lane of finding %s (%v)", want, f.ID, f.LaneSpecs)
}

// laneErrno is lane's errno of f's last op (0: none recorded).
func laneErrno(f *session.Finding, lane string) int {
	for _, r := range f.Lanes {
		if r.Lane == lane {
			return int(r.Errno)
		}
	}
	return 0
}
