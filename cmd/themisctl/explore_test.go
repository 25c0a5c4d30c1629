package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestFindingStream: explore shows a finding when it is found and again
// when its minimized update comes; --json keeps the latest version with the
// trace as found beside it.
func TestFindingStream(t *testing.T) {
	raw := []string{"chmod d-00 0700", "mkdir d-00 0755"}
	asFound := &themisv1.Finding{Id: "f-1", Kind: "errno-divergence", Detail: "mkdir: lanes disagree", Trace: raw, FoundTrace: raw}
	minimized := &themisv1.Finding{Id: "f-1", Kind: "errno-divergence", Detail: "mkdir: lanes disagree", Trace: raw[1:], FoundTrace: raw, Minimized: true}
	other := &themisv1.Finding{Id: "f-2", Kind: "state-divergence", Detail: "differ", Trace: raw, FoundTrace: raw}

	var log findingLog
	var out bytes.Buffer
	for i, f := range []*themisv1.Finding{asFound, other, minimized} {
		update := log.add(f)
		if update != (i == 2) {
			t.Errorf("message %d: update %v", i, update)
		}
		printStreamed(&out, f, update)
	}
	text := out.String()
	for _, want := range []string{
		"finding f-1  errno-divergence  mkdir: lanes disagree\n  trace as found, 2 ops:\n  1. chmod d-00 0700\n  2. mkdir d-00 0755\n  (minimized after the search)\n",
		"finding f-1  minimized to 1 op from 2 as found\n  1. mkdir d-00 0755\n  reproduce: themisctl replay f-1\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output\n%s\nwant it to contain\n%s", text, want)
		}
	}
	js := log.json()
	if len(js) != 2 || js[0].ID != "f-1" || js[1].ID != "f-2" {
		t.Fatalf("json findings %+v: want f-1 then f-2, once each", js)
	}
	if !js[0].Minimized || !slices.Equal(js[0].Trace, raw[1:]) || !slices.Equal(js[0].FoundTrace, raw) {
		t.Errorf("f-1 in json: %+v, want the minimized trace and the trace as found", js[0])
	}
	if js[1].Minimized || !slices.Equal(js[1].Trace, raw) {
		t.Errorf("f-2 in json: %+v, want it as found", js[1])
	}

	out.Reset()
	printFinding(&out, minimized)
	if want := "  trace minimized to 1 op from 2 as found:\n  1. mkdir d-00 0755\n"; !strings.Contains(out.String(), want) {
		t.Errorf("findings output\n%s\nwant\n%s", out.String(), want)
	}
}
