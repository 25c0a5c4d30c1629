package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"google.golang.org/protobuf/proto"
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
	js := log.list()
	if len(js) != 2 || js[0].GetId() != "f-1" || js[1].GetId() != "f-2" {
		t.Fatalf("json findings %v: want f-1 then f-2, once each", js)
	}
	if !js[0].GetMinimized() || !slices.Equal(js[0].GetTrace(), raw[1:]) || !slices.Equal(js[0].GetFoundTrace(), raw) {
		t.Errorf("f-1 in json: %v, want the minimized trace and the trace as found", js[0])
	}
	if js[1].GetMinimized() || !slices.Equal(js[1].GetTrace(), raw) {
		t.Errorf("f-2 in json: %v, want it as found", js[1])
	}

	out.Reset()
	printFinding(&out, minimized)
	if want := "  trace minimized to 1 op from 2 as found:\n  1. mkdir d-00 0755\n"; !strings.Contains(out.String(), want) {
		t.Errorf("findings output\n%s\nwant\n%s", out.String(), want)
	}
}

// TestExploreJSON pins explore's --json: an ExploreResult (the request,
// the summary as the daemon sent it, the findings in the order found),
// roots as base64 as protojson renders bytes, and it decodes back as one.
func TestExploreJSON(t *testing.T) {
	t.Parallel()
	sum := &themisv1.ExploreSummary{SessionId: "s-1", States: 12, UniqueStates: 2, StatesPerSec: 5.5, Backend: "qemu", Revert: "remount", ElapsedS: 2.25, Workers: 2,
		MaxDepth: 1, UniqueByDepth: []int64{1, 1}, Digest: "d", Roots: []*themisv1.LaneRoot{{Lane: "ext2", Root: []byte{0xab, 0x01}}}}
	var found findingLog
	found.add(&themisv1.Finding{Id: "f-1", Kind: "errno-divergence", Detail: "x", Trace: []string{"mkdir d 0755"}})
	req := &themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 2, Seed: 7}
	tests := []struct {
		name  string
		found *findingLog
		want  string
	}{
		{name: "no finding", found: &findingLog{},
			want: `{"schema":"themis.v1.ExploreResult","request":{"lanes":["ext2"],"depth":2,"seed":"7"},"summary":{"session_id":"s-1","states":"12","unique_states":"2","states_per_sec":5.5,"backend":"qemu","elapsed_s":2.25,"max_depth":1,"digest":"d","roots":[{"lane":"ext2","root":"qwE="}],"revert":"remount","workers":2,"unique_by_depth":["1","1"]}}`},
		{name: "a finding", found: &found,
			want: `"finding_list":[{"id":"f-1","kind":"errno-divergence","detail":"x","trace":["mkdir d 0755"]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := &themisv1.ExploreResult{Request: req, Summary: sum, FindingList: tt.found.list()}
			got, err := protoJSON(res, false)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(got), tt.want) && string(got) != tt.want {
				t.Errorf("explore --json:\n got %s\nwant %s", got, tt.want)
			}
			var back themisv1.ExploreResult
			decodeOut(t, got, &back)
			if !proto.Equal(&back, res) {
				t.Errorf("decoded %v, want %v", &back, res)
			}
		})
	}
}
