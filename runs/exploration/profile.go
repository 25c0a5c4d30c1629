package exploration

import (
	"context"
	"sync"
	"time"

	"github.com/themisfs/themis/nbd"
	"github.com/themisfs/themis/vmm"
)

// Profile is where a run's time went below Summary's parts, and what the
// guest asked of its disks, summed over every worker's sessions. For
// `bench explore`'s per-state split: nothing in the search depends on it.
type Profile struct {
	// Umount and Mount are the remount revert's agent calls that unmount
	// and mount every lane (host wall time: parts of RestoreTime and
	// CheckpointTime, and of OpTime where a replay remounts first); Disk
	// is its overlay pops, pushes and merges on the host. Remounts counts
	// umount-and-mount rounds of every lane.
	Umount, Mount, Disk time.Duration
	Remounts            int
	// AgentOp and AgentWalk are the agent's own time (the guest's clock,
	// Response.agent_ns) in the steps' ops and in the walks batched with
	// them; AgentUmount and AgentMount in the remount revert's calls. 0
	// from an agent that does not report it.
	AgentOp, AgentWalk, AgentUmount, AgentMount time.Duration
	// IOStep, IOUmount and IOMount are the requests every lane's disks
	// served during the steps, the unmounts and the mounts; IOAll from a
	// system's first step or remount to the end of the run (boot
	// excluded). Zero where the backend does not count them
	// (vmm.DiskCounter).
	IOStep, IOUmount, IOMount, IOAll nbd.Counts
}

// Add returns p + q, part by part.
func (p Profile) Add(q Profile) Profile {
	return Profile{
		Umount: p.Umount + q.Umount, Mount: p.Mount + q.Mount, Disk: p.Disk + q.Disk, Remounts: p.Remounts + q.Remounts,
		AgentOp: p.AgentOp + q.AgentOp, AgentWalk: p.AgentWalk + q.AgentWalk,
		AgentUmount: p.AgentUmount + q.AgentUmount, AgentMount: p.AgentMount + q.AgentMount,
		IOStep: p.IOStep.Add(q.IOStep), IOUmount: p.IOUmount.Add(q.IOUmount), IOMount: p.IOMount.Add(q.IOMount), IOAll: p.IOAll.Add(q.IOAll),
	}
}

// IOOther is IOAll less the phases counted apart: the checks, the
// fingerprints taken alone, the drops.
func (p Profile) IOOther() nbd.Counts {
	return p.IOAll.Sub(p.IOStep).Sub(p.IOUmount).Sub(p.IOMount)
}

// profiler is a system's share of the run's Profile. Its own mutex: the
// summary reads it from another goroutine once the workers are done.
type profiler struct {
	mu sync.Mutex
	p  Profile
	// counter reads the session's disk counts (nil: the backend does not
	// count, or not looked up yet: looked); start is the counts at the
	// first step.
	counter vmm.DiskCounter
	looked  bool
	start   nbd.Counts
}

// diskCounts is the sum of every disk's counts now (zero without a counter).
// The first call looks the counter up and takes the run's start. Only the
// system's worker calls it.
func (x *system) diskCounts(ctx context.Context) nbd.Counts {
	pr := &x.prof
	pr.mu.Lock()
	looked, c := pr.looked, pr.counter
	pr.mu.Unlock()
	if looked {
		return sumCounts(c)
	}
	// A failure leaves the profile without disk counts; the call that
	// needs the session reports it.
	_ = x.run.Do(ctx, "disk counts", func(_ context.Context, mach vmm.Machine) error {
		c, _ = mach.(vmm.DiskCounter)
		return nil
	})
	now := sumCounts(c)
	pr.mu.Lock()
	pr.looked, pr.counter, pr.start = true, c, now
	pr.mu.Unlock()
	return now
}

// sumCounts adds up c's disks (zero when c is nil).
func sumCounts(c vmm.DiskCounter) nbd.Counts {
	var out nbd.Counts
	if c == nil {
		return out
	}
	for _, d := range c.DiskCounts() {
		out = out.Add(d)
	}
	return out
}

// record adds to the profile under its lock.
func (pr *profiler) record(f func(p *Profile)) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	f(&pr.p)
}

// profile is x's share: what was recorded and its disks' counts from the
// first step to now.
func (x *system) profile() Profile {
	pr := &x.prof
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.p
	if pr.counter != nil {
		p.IOAll = sumCounts(pr.counter).Sub(pr.start)
	}
	return p
}

// sumProfiles is the profiles of systems added up.
func sumProfiles(systems []*system) Profile {
	var out Profile
	for _, x := range systems {
		out = out.Add(x.profile())
	}
	return out
}
