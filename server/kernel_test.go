package server

import (
	"slices"
	"testing"

	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/runs/belowfs"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/runs/crashcheck"
	"github.com/themisfs/themis/session"
)

// TestFindingProtoKernel: a kernel finding's report reaches the API's
// Finding.kernel field by field; other findings have none.
func TestFindingProtoKernel(t *testing.T) {
	r := &kreport.Report{Kind: kreport.Bug, Title: "kernel BUG at fs/ext4/namei.c:3477!", RIP: "ext4_link+0x1c/0x90 [ext4]",
		Trace: []string{"vfs_link+0x1e2/0x330"}, Panic: "Fatal exception", Text: "kernel BUG at fs/ext4/namei.c:3477!"}
	k := findingProto(&session.Finding{ID: "f-1", Kind: session.KindKernel, Kernel: r}).GetKernel()
	if k.GetKind() != "bug" || k.GetTitle() != r.Title || k.GetRip() != r.RIP || !slices.Equal(k.GetTrace(), r.Trace) || k.GetPanic() != r.Panic || k.GetText() != r.Text {
		t.Errorf("kernel report %v, want %+v", k, r)
	}
	if p := findingProto(&session.Finding{ID: "f-2", Kind: "errno-divergence"}); p.GetKernel() != nil {
		t.Errorf("errno finding with a kernel report %v", p.GetKernel())
	}
}

// TestCrashResultProtoKernel: a crash state whose check crashed the
// guest's kernel carries the report and the session it was checked in;
// the summary, every session and the deaths.
func TestCrashResultProtoKernel(t *testing.T) {
	r := &kreport.Report{Kind: kreport.Panic, Title: "Kernel panic - not syncing: sysrq triggered crash", Trace: []string{"sysrq_handle_crash+0x15/0x20"}}
	p := crashResultProto(crashcheck.Result{Lane: "ext2", Verdict: crashcheck.KernelCrash, Kernel: r, Session: "s-1"})
	if k := p.GetKernel(); k.GetKind() != "panic" || k.GetTitle() != r.Title || !slices.Equal(k.GetTrace(), r.Trace) || p.GetSessionId() != "s-1" {
		t.Errorf("crash result %v: want the report and the session", p)
	}
	if p := crashResultProto(crashcheck.Result{Lane: "ext2", Verdict: crashcheck.Clean}); p.GetKernel() != nil {
		t.Errorf("clean state with a kernel report %v", p.GetKernel())
	}
	sum := crashSummaryProto(&crashcheck.Summary{Session: "s-1", Sessions: []string{"s-1", "s-2"}, Deaths: 1,
		Lanes: map[string]*crashcheck.LaneSummary{"ext2": {States: 2, Deaths: 1, Skipped: 1, SkipNote: "the log differs"}}}).GetSummary()
	if l := sum.GetLanes()[0]; !slices.Equal(sum.GetSessions(), []string{"s-1", "s-2"}) || sum.GetDeaths() != 1 || l.GetDeaths() != 1 || l.GetSkipped() != 1 || l.GetSkipNote() == "" {
		t.Errorf("summary %v: want the sessions, the deaths and the skipped states", sum)
	}
}

// TestSweepCellProtoKernel: a sweep cell whose op crashed the guest's
// kernel carries the report; the summary, every session and the deaths.
func TestSweepCellProtoKernel(t *testing.T) {
	r := &kreport.Report{Kind: kreport.Panic, Title: "Kernel panic - not syncing: sysrq triggered crash"}
	if k := sweepCellProto(clocksweep.Cell{Lane: "ext2", Op: "mkdir", Verdict: "kernel-crash", Kernel: r}).GetKernel(); k.GetTitle() != r.Title || k.GetKind() != "panic" {
		t.Errorf("cell's kernel report %v, want %+v", k, r)
	}
	if k := sweepCellProto(clocksweep.Cell{Lane: "ext2", Op: "touch", Verdict: "represented"}).GetKernel(); k != nil {
		t.Errorf("represented cell with a kernel report %v", k)
	}
	sum := sweepSummaryProto(&clocksweep.Summary{Session: "s-1", Sessions: []string{"s-1", "s-2"}, Deaths: 1})
	if !slices.Equal(sum.GetSessions(), []string{"s-1", "s-2"}) || sum.GetDeaths() != 1 {
		t.Errorf("summary %v: want the sessions and the death", sum)
	}
}

// TestCorruptResultProtoKernel: a flip whose mount crashed the guest's
// kernel carries the report; the summary, every session and the deaths.
func TestCorruptResultProtoKernel(t *testing.T) {
	r := &kreport.Report{Kind: kreport.Oops, Title: "BUG: kernel NULL pointer dereference, address: 0000000000000008", RIP: "ext2_fill_super+0x1c/0x90 [ext2]"}
	if k := corruptResultProto(belowfs.CorruptResult{Lane: "ext2", Target: "superblock.magic", Class: belowfs.ClassKernelCrash, Kernel: r}).GetKernel(); k.GetRip() != r.RIP || k.GetKind() != "oops" {
		t.Errorf("result's kernel report %v, want %+v", k, r)
	}
	if k := corruptResultProto(belowfs.CorruptResult{Lane: "ext2", Target: "superblock.magic", Class: belowfs.ClassFatal}).GetKernel(); k != nil {
		t.Errorf("fatal flip with a kernel report %v", k)
	}
	sum := corruptSummaryProto(&belowfs.CorruptSummary{Session: "s-1", Sessions: []string{"s-1", "s-2"}, Deaths: 1, ByClass: map[string]int{"kernel-crash": 1}})
	if !slices.Equal(sum.GetSessions(), []string{"s-1", "s-2"}) || sum.GetDeaths() != 1 || sum.GetByClass()["kernel-crash"] != 1 {
		t.Errorf("summary %v: want the sessions, the death and the class", sum)
	}
}
