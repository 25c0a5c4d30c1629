package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

func TestCheckExit(t *testing.T) {
	for _, tc := range []struct {
		name string
		sum  *themisv1.CheckSummary
		fail bool
		code int // 0: no error
	}{
		{name: "clean", sum: &themisv1.CheckSummary{}, fail: true},
		{name: "findings without the flag", sum: &themisv1.CheckSummary{Findings: 2}},
		{name: "findings with the flag", sum: &themisv1.CheckSummary{Findings: 2}, fail: true, code: exitFindings},
		{name: "a part failed", sum: &themisv1.CheckSummary{Findings: 2, Failed: 1}, fail: true, code: exitFailed},
		{name: "a part failed, no flag", sum: &themisv1.CheckSummary{Failed: 1}, code: exitFailed},
	} {
		err := checkExit(tc.sum, tc.fail)
		if (err == nil) != (tc.code == 0) || (err != nil && exitCode(err) != tc.code) {
			t.Errorf("%s: err %v, want exit %d", tc.name, err, tc.code)
		}
	}
}

func TestPartStatus(t *testing.T) {
	for _, tc := range []struct {
		p    *themisv1.CheckPart
		want string
	}{
		{&themisv1.CheckPart{Skipped: "no checker"}, "skipped: no checker"},
		{&themisv1.CheckPart{Error: "boom", ElapsedS: 3}, "failed after 3s: boom"},
		{&themisv1.CheckPart{Findings: 1, ElapsedS: 61, Stopped: "max-duration", Depth: 4, Explore: &themisv1.ExploreSummary{States: 9, UniqueStates: 4, MaxDepth: 3}},
			"1 finding(s) in 1m1s, last run depth 4: 9 states (4 unique), stopped: max-duration"},
		{&themisv1.CheckPart{ElapsedS: 40, Sweep: &themisv1.SweepSummary{Cells: 372}}, "0 finding(s) in 40s, 372 cells"},
		{&themisv1.CheckPart{ElapsedS: 40, SetupFailed: "explore: setup: op 3 (mkdir d-00/d-00 0755) failed on lane ext4: errno 74 (bad message)"},
			"0 finding(s) in 40s; every run from the empty root: explore: setup: op 3 (mkdir d-00/d-00 0755) failed on lane ext4: errno 74 (bad message)"},
		{&themisv1.CheckPart{ElapsedS: 50, UnconfirmedHangs: 2},
			"0 finding(s) in 50s; 2 hung task(s) not confirmed (did not recur in a fresh guest: not findings)"},
		{&themisv1.CheckPart{ElapsedS: 90, Depth: 10, Walks: 2, Explore: &themisv1.ExploreSummary{States: 300, UniqueStates: 200}},
			"0 finding(s) in 1m30s, last run depth 10: 300 states (200 unique), after the full tree 2 round(s) of walks"},
	} {
		if got := partStatus(tc.p); got != tc.want {
			t.Errorf("partStatus = %q, want %q", got, tc.want)
		}
	}
}

// TestCheckJUnit: one suite per part that ran, the explore findings in
// the part whose sessions found them, the clock cells in the clock part,
// duplicates left out.
func TestCheckJUnit(t *testing.T) {
	sum := &themisv1.CheckSummary{
		Parts: []*themisv1.CheckPart{
			{Kind: "clock", Name: "clock exfat", Lanes: []string{"exfat"}, Findings: 1,
				Cells: []*themisv1.SweepCell{{Lane: "exfat", Op: "mkdir", Field: "mtime", Name: "2^32-1", Verdict: "diverged(x)", Expected: "represented"}}},
			{Kind: "differential", Name: "differential exfat,ext2", Lanes: []string{"exfat", "ext2"}, Explore: &themisv1.ExploreSummary{Sessions: []string{"s-1", "s-2"}}},
			{Kind: "reference", Name: "reference exfat", Lanes: []string{"exfat"}, Findings: 1, Explore: &themisv1.ExploreSummary{Sessions: []string{"s-3"}}},
			{Kind: "crash", Name: "crash exfat", Lanes: []string{"exfat"}, Skipped: "why"},
		},
		Found: []*themisv1.Finding{
			{Id: "f-1", SessionId: "s-3", Kind: "self-reference:fsck", Signature: "sig1", Detail: "fsck.exfat reports errors"},
			{Id: "f-2", SessionId: "s-3", Kind: "self-reference:fsck", Signature: "sig1", DuplicateOf: "f-1"},
		},
	}
	path := filepath.Join(t.TempDir(), "check.xml")
	if err := writeCheckJUnit(path, sum, "bug-x"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Name     string `xml:"name,attr"`
			Failures int    `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	var names []string
	for _, s := range doc.Suites {
		names = append(names, s.Name)
	}
	if strings.Join(names, ";") != "check clock exfat;check differential exfat,ext2;check reference exfat" {
		t.Errorf("suites %q", names)
	}
	// clock and reference: the lane's case fails with its finding.
	if doc.Suites[0].Failures != 1 || doc.Suites[1].Failures != 0 || doc.Suites[2].Failures != 1 || doc.Failures != 2 {
		t.Errorf("failures %+v\n%s", doc, b)
	}
	for _, want := range []string{"reproduce: themisctl sweep clock --fs exfat --ops mkdir --values 0.000000000 --image bug-x", "reproduce: themisctl replay f-1;"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %q in\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "f-2") {
		t.Errorf("the duplicate f-2 is in the report:\n%s", b)
	}
}
