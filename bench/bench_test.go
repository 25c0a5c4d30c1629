package bench

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/nbd"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// baseline runs Baseline, skipping (or failing under CI=true) where the host
// cannot loop-mount.
func baseline(t testing.TB, o BaselineOptions) *BaselineResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := Baseline(ctx, o)
	if errors.Is(err, ErrUnavailable) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("required under CI=true: %v", err)
		}
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBaseline(t *testing.T) {
	for _, c := range []struct {
		name string
		o    BaselineOptions
	}{
		{"Syscall4MiB", BaselineOptions{Lane: "ext2:size=4", States: 20}},
		{"SyscallDefault", BaselineOptions{States: 20}},
		{"Exec", BaselineOptions{Lane: "ext2:size=4", States: 5, Mount: MountExec}},
		{"DiskWorkDir", BaselineOptions{Lane: "ext2:size=4", States: 20, WorkDir: os.TempDir()}},
		// Past one chain, so a state restores the root image again.
		{"Ext4Chains", BaselineOptions{Lane: "ext4", States: chainLen + 4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := baseline(t, c.o)
			want := c.o.States
			if r.States != want {
				t.Errorf("states %d, want %d", r.States, want)
			}
			var sum time.Duration
			for _, d := range r.StateTimes {
				sum += d
			}
			if len(r.StateTimes) != want || sum > r.Elapsed {
				t.Errorf("%d state times summing to %s, want %d within the elapsed %s", len(r.StateTimes), sum, want, r.Elapsed)
			}
			s := r.Split()
			t.Logf("%s (%d KiB, %s, in %s): %.3f ms/state: restore %.3f, mount %.3f, op %.3f, umount %.3f, store %.3f",
				r.Lane, r.ImageBytes>>10, r.Mount, r.WorkDir, s.Total, s.Restore, s.Mount, s.Op, s.Umount, s.Store)
			for name, v := range map[string]float64{"restore": s.Restore, "mount": s.Mount, "op": s.Op, "umount": s.Umount, "store": s.Store} {
				if v <= 0 {
					t.Errorf("%s %.6f ms/state: want > 0", name, v)
				}
			}
			parts := s.Restore + s.Mount + s.Op + s.Umount + s.Store
			if parts > s.Total*1.0001 || parts < s.Total*0.5 {
				t.Errorf("parts sum to %.3f ms, total %.3f ms", parts, s.Total)
			}
			if math.Abs(s.Backtrack-(parts-s.Op)) > 1e-9 {
				t.Errorf("backtrack %.3f, want parts less op %.3f", s.Backtrack, parts-s.Op)
			}
		})
	}
}

func TestBaselineBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		o    BaselineOptions
		want string
	}{
		{BaselineOptions{States: -1}, "states -1"},
		{BaselineOptions{States: MaxBaselineStates + 1}, "states"},
		{BaselineOptions{Mount: "fuse"}, `mount mode "fuse"`},
		{BaselineOptions{Lane: "zfs"}, "unknown filesystem"},
	} {
		_, err := Baseline(ctx, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Baseline(%+v) = %v, want an error containing %q", c.o, err, c.want)
		}
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	s := &exploration.Summary{
		States: 100, StatesPerSec: 5, Backend: "qemu", Elapsed: 20 * time.Second,
		OpTime: 10 * time.Second, FingerprintTime: 5 * time.Second,
		RestoreTime: 3 * time.Second, CheckpointTime: time.Second,
	}
	e := exploreBench(s, []string{"ext2"})
	b := &BaselineResult{Lane: "ext2:inode_size=128:size=4", ImageBytes: 4 << 20, States: 10, Mount: MountSyscall,
		Elapsed: 100 * time.Millisecond, RestoreTime: 10 * time.Millisecond, MountTime: 40 * time.Millisecond,
		OpTime: 5 * time.Millisecond, UmountTime: 35 * time.Millisecond, StoreTime: 10 * time.Millisecond}
	c := Compare(e, b)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("ThemisMsPerState", c.ThemisMsPerState, 200)
	near("BaselineMsPerState", c.BaselineMsPerState, 10)
	near("Ratio", c.Ratio, 0.05)
	near("ThemisBacktrackMs", c.ThemisBacktrackMs, 40)
	near("BaselineBacktrackMs", c.BaselineBacktrackMs, 9.5)
	near("BacktrackRatio", c.BacktrackRatio, 9.5/40)
	near("Other", e.Other, 10)
	out := c.String()
	for _, want := range []string{"themis (qemu)", "baseline (loop remount)", "200.000", "10.000", "4096 KiB", "0.05x per state"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if got := Compare(nil, nil); got.Ratio != 0 || got.String() == "" {
		t.Errorf("Compare(nil, nil) = %+v", got)
	}
	s2 := *s
	s2.Revert, s2.Elapsed = "remount", 5*time.Second
	s.Revert = "machine"
	e, e2 := exploreBench(s, []string{"ext2"}), exploreBench(&s2, []string{"ext2"})
	e2.Channel = "uart"
	rep := Report{Baseline: b, Runs: []Comparison{Compare(e, b), Compare(e2, b)}}.String()
	for _, want := range []string{"themis (qemu, machine)", "themis (qemu, remount, uart)", "200.000", "50.000",
		"baseline/themis (qemu, machine): 0.05x", "baseline/themis (qemu, remount, uart): 0.2x"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	// The profile: the remount revert's parts and the disks' requests, per
	// state (100 states).
	s2.Profile = exploration.Profile{Umount: 2 * time.Second, Mount: 3 * time.Second, Disk: 100 * time.Millisecond, Remounts: 150,
		AgentOp: time.Second, AgentWalk: 4 * time.Second, AgentUmount: 1500 * time.Millisecond, AgentMount: 2500 * time.Millisecond,
		IOStep:   nbd.Counts{Reads: 1000, ReadBytes: 4 << 20, Serve: time.Second},
		IOUmount: nbd.Counts{Writes: 300, WriteBytes: 1 << 20, Flushes: 100},
		IOMount:  nbd.Counts{Reads: 200, ReadBytes: 800 << 10},
		IOAll:    nbd.Counts{Reads: 1300, ReadBytes: 5<<20 + 800<<10, Writes: 300, WriteBytes: 1 << 20, Flushes: 100, Rejected: 1, Serve: 2 * time.Second}}
	e2 = exploreBench(&s2, []string{"ext2"})
	e2.Channel = "uart"
	near("Umount", e2.Umount, 20)
	near("Mount", e2.Mount, 30)
	near("Disk", e2.Disk, 1)
	near("Remounts", e2.Remounts, 1.5)
	near("AgentWalk", e2.AgentWalk, 40)
	near("AgentMount", e2.AgentMount, 25)
	if len(e2.IO) != len(DiskPhases) {
		t.Fatalf("IO phases %+v, want %v", e2.IO, DiskPhases)
	}
	near("step reads", e2.IO[0].Reads, 10)
	near("step serve ms", e2.IO[0].Serve, 10)
	near("umount flushes", e2.IO[1].Flushes, 1)
	near("mount read bytes", e2.IO[2].ReadBytes, 8<<10)
	near("other reads", e2.IO[3].Reads, 1) // all less the three phases
	near("other rejected", e2.IO[3].Rejected, 0.01)
	near("all requests", e2.IO[4].Requests, 17.01)
	if e.IO != nil {
		t.Errorf("a run without disk counts has IO %+v, want none", e.IO)
	}
	prof := Report{Baseline: b, Runs: []Comparison{Compare(e2, b)}}.String()
	for _, want := range []string{"20.000", "30.000", "1.50", "nbd step: requests (r/w/z/f)", "10.0 (10.0/0.0/0.0/0.0)", "4.0 (0.0/3.0/0.0/1.0)", "41.0/0.0, 10.000"} {
		if !strings.Contains(prof, want) {
			t.Errorf("report lacks %q:\n%s", want, prof)
		}
	}
	var got themisv1.BenchExploreReport
	roundTrip(t, (&Report{Baseline: b, Runs: []Comparison{Compare(e, b), Compare(e2, b)}}).Proto(), &got)
	if ps, io := got.GetRuns()[1].GetPerState(), got.GetRuns()[1].GetDiskIo(); math.Abs(ps.GetMountS()-0.03) > 1e-9 || math.Abs(ps.GetAgentWalkS()-0.04) > 1e-9 ||
		math.Abs(ps.GetRemounts()-1.5) > 1e-9 || len(io) != 5 || io[4].GetPhase() != "all" || math.Abs(io[0].GetServeS()-0.01) > 1e-9 {
		t.Errorf("--json profile: %v", got.GetRuns()[1])
	}
	runs := got.GetRuns()
	if len(runs) != 2 || runs[0].GetSummary().GetRevert() != "machine" || runs[1].GetChannel() != "uart" || runs[0].GetStates() != 100 ||
		math.Abs(runs[0].GetPerState().GetTotalS()-0.2) > 1e-9 || math.Abs(runs[0].GetRatio()-0.05) > 1e-9 ||
		got.GetBaseline().GetLane() != b.Lane || math.Abs(got.GetBaseline().GetPerState().GetMountS()-0.004) > 1e-9 {
		t.Errorf("--json: %v", &got)
	}
}

// roundTrip renders m as --json does and decodes it into into (the same
// message type), returning the JSON.
func roundTrip(t *testing.T, m, into proto.Message) []byte {
	t.Helper()
	b, err := jsonout.Encode(m, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := jsonout.DecodeInto(b, into); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !proto.Equal(m, into) {
		t.Errorf("decoded %v, want %v", into, m)
	}
	return b
}

// TestRunRealGuest measures the baseline and a QEMU explore run side by
// side, on the same ext2 image spec, and logs the table.
func TestRunRealGuest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	managers := func(_ context.Context, ch vmm.AgentChannel) (*session.Manager, error) {
		return sessiontest.Real(t, session.Config{AgentChannel: ch}), nil
	}
	r, err := Run(ctx, managers, Options{
		Channels: []vmm.AgentChannel{vmm.AgentVirtio}, // bench explore's default adds uart: twice the time
		Explore:  exploration.Options{Lanes: []string{"ext2"}, Depth: 2, Branching: 10, MaxStates: 40, Seed: 7},
		Baseline: BaselineOptions{CacheDir: vmmtest.Setup(t).CacheDir},
	})
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true" {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r)
	if len(r.Runs) != len(DefaultReverts) || r.Baseline.States != DefaultBaselineStates {
		t.Fatalf("report %+v: want one run per default revert and the baseline", r)
	}
	for i, c := range r.Runs {
		if c.Explore.States == 0 || c.Ratio <= 0 || c.Explore.Summary.Revert != DefaultReverts[i] || c.Explore.Channel != string(vmm.AgentVirtio) {
			t.Errorf("run %d: comparison %+v, want states, a ratio and revert %s", i, c, DefaultReverts[i])
		}
	}
	if a, b := r.Runs[0].Explore.Summary, r.Runs[1].Explore.Summary; a.Digest != b.Digest {
		t.Errorf("revert %s and %s reached different states: digest %s, %s", a.Revert, b.Revert, a.Digest, b.Digest)
	}
	if want := "ext2:inode_size=128:size=8"; r.Baseline.Lane != want {
		t.Errorf("baseline lane %s, want the explore lane's image %s", r.Baseline.Lane, want)
	}
}

// BenchmarkBaseline measures b.N baseline states on the 4 MiB ext2 image of
// the anchor (8.8 ms/state on the reference machine).
func BenchmarkBaseline(b *testing.B) {
	// Make (or find) the base image before the timer counts.
	baseline(b, BaselineOptions{Lane: "ext2:size=4", States: 1})
	b.ResetTimer()
	r := baseline(b, BaselineOptions{Lane: "ext2:size=4", States: b.N})
	s := r.Split()
	b.ReportMetric(s.Total, "ms/state")
	b.ReportMetric(s.Backtrack, "backtrack-ms/state")
	b.ReportMetric(s.Mount+s.Umount, "remount-ms/state")
}
