package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestBlastTable checks the side-by-side table against the results: a row
// per target in first-seen order, a column per lane, "-" for a missing
// cell, and n/a rows printed without a bit.
func TestBlastTable(t *testing.T) {
	t.Parallel()
	results := []*themisv1.CorruptResult{
		{Lane: "ext2", Target: "data:d/f:0:0", Class: "silent-content", Mounted: true, FsckClean: true, Affected: []string{"d/f"}},
		{Lane: "ext2", Target: "superblock.magic", Class: "fatal", Lba: 2, Offset: 56},
		{Lane: "btrfs", Target: "data:d/f:0:0", Class: "detected", Mounted: true, ReadErrno: 5, Affected: []string{"d/f"}},
		{Lane: "btrfs", Target: "superblock.magic", Class: "n/a", Field: "btrfs has no ext2/3/4 superblock field"},
		{Lane: "btrfs", Target: "lba:128:64:0", Class: "fatal"},
	}
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmtRows(w, results)
	writeBlastTable(w, results)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	t.Log("\n" + got)
	lines := strings.Split(strings.TrimSpace(got[strings.Index(got, "BLAST RADIUS"):]), "\n")
	want := [][]string{
		{"BLAST", "RADIUS", "ext2", "btrfs"},
		{"data:d/f:0:0", "silent-content", "detected"},
		{"superblock.magic", "fatal", "n/a"},
		{"lba:128:64:0", "-", "fatal"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d table lines, want %d", len(lines), len(want))
	}
	for i, l := range lines {
		if f := strings.Fields(l); strings.Join(f, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d: %q, want %q", i, f, want[i])
		}
	}
	for _, s := range []string{"d/f (read errno 5)", "btrfs  superblock.magic", "btrfs has no ext2/3/4 superblock field  n/a"} {
		if !strings.Contains(got, s) {
			t.Errorf("rows lack %q", s)
		}
	}
}

func fmtRows(w *tabwriter.Writer, rs []*themisv1.CorruptResult) {
	for _, r := range rs {
		writeCorruptRow(w, r)
	}
}

// TestCorruptRowKernel: a flip that crashed the guest's kernel prints its
// class and the report's first line (RIP and panic), not a mount or fsck
// it never reached; one that hung the guest prints what the call saw.
func TestCorruptRowKernel(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmtRows(w, []*themisv1.CorruptResult{
		{Lane: "ext2", Target: "superblock.magic", Class: "kernel-crash", Lba: 2, Offset: 56, Field: "s_magic",
			Kernel: &themisv1.KernelReport{Kind: "oops", Title: "BUG: kernel NULL pointer dereference, address: 0000000000000008", Rip: "ext2_fill_super+0x1c/0x90 [ext2]", Panic: "Fatal exception"}},
		{Lane: "ext2", Target: "gd.bg_inode_table", Class: "guest-hung", KernelLog: []string{"no answer within 2m0s and no kernel report on the console"}},
	})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(b.String()), " ")
	for _, s := range []string{"s_magic kernel-crash - - BUG: kernel NULL pointer dereference, address: 0000000000000008 (RIP ext2_fill_super+0x1c/0x90 [ext2]); panic: Fatal exception",
		"guest-hung - - no answer within 2m0s"} {
		if !strings.Contains(got, s) {
			t.Errorf("rows lack %q:\n%s", s, got)
		}
	}
}
