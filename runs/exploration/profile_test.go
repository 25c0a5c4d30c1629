package exploration

import (
	"testing"
	"time"

	"github.com/themisfs/themis/nbd"
)

func TestProfileSums(t *testing.T) {
	t.Parallel()
	a := Profile{Umount: time.Second, Mount: 2 * time.Second, Disk: 3, Remounts: 4, AgentOp: 5, AgentWalk: 6, AgentUmount: 7, AgentMount: 8,
		IOStep: nbd.Counts{Reads: 10, ReadBytes: 40960}, IOUmount: nbd.Counts{Writes: 2, Flushes: 1}, IOMount: nbd.Counts{Reads: 3},
		IOAll: nbd.Counts{Reads: 14, ReadBytes: 45056, Writes: 2, Flushes: 1, Rejected: 1}}
	b := Profile{Umount: time.Second, Remounts: 1, AgentWalk: 4, IOStep: nbd.Counts{Reads: 1}, IOAll: nbd.Counts{Reads: 1}}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"add", a.Add(b), Profile{Umount: 2 * time.Second, Mount: 2 * time.Second, Disk: 3, Remounts: 5, AgentOp: 5, AgentWalk: 10, AgentUmount: 7, AgentMount: 8,
			IOStep: nbd.Counts{Reads: 11, ReadBytes: 40960}, IOUmount: nbd.Counts{Writes: 2, Flushes: 1}, IOMount: nbd.Counts{Reads: 3},
			IOAll: nbd.Counts{Reads: 15, ReadBytes: 45056, Writes: 2, Flushes: 1, Rejected: 1}}},
		{"other", a.IOOther(), nbd.Counts{Reads: 1, ReadBytes: 4096, Rejected: 1}},
		{"zero", Profile{}.Add(Profile{}), Profile{}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

// TestProfileWithoutCounter: a system whose machine counts nothing keeps
// zero disk counts and adds the times it was given.
func TestProfileWithoutCounter(t *testing.T) {
	t.Parallel()
	x := &system{}
	x.prof.looked = true // no counter
	if got := x.diskCounts(t.Context()); got != (nbd.Counts{}) {
		t.Errorf("diskCounts = %+v, want zero", got)
	}
	x.prof.record(func(p *Profile) { p.Mount += time.Millisecond; p.Remounts++ })
	if got := sumProfiles([]*system{x, x}); got.Mount != 2*time.Millisecond || got.Remounts != 2 || got.IOAll != (nbd.Counts{}) {
		t.Errorf("sumProfiles = %+v", got)
	}
}
