package main

import (
	"bytes"
	"encoding/json"
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

// TestExploreJSON pins explore's --json shape: the summary's fields at the
// top level, roots as lane -> hex, below_roots and layers only for overlay
// lanes, and finding_list never null.
func TestExploreJSON(t *testing.T) {
	t.Parallel()
	sum := &themisv1.ExploreSummary{SessionId: "s-1", States: 12, UniqueStates: 2, StatesPerSec: 5.5, Backend: "qemu", Revert: "remount", ElapsedS: 2.25, Workers: 2, WorkersWhy: "auto: 2 CPUs", Sessions: []string{"s-1", "s-9"},
		MaxDepth: 1, UniqueByDepth: []int64{1, 1}, Digest: "d", Roots: []*themisv1.LaneRoot{{Lane: "ext2", Root: []byte{0xab, 0x01}}}, OpS: 1, FingerprintS: 0.5, RestoreS: 0.25,
		Policy: "auto", Judged: "auto (...)\n  directory nlink ignored: btrfs (...)", OpsLeftOut: []string{"symlink"}, DeclaredOps: 3, DeclaredStates: 4}
	overlay := &themisv1.ExploreSummary{SessionId: "s-2", Stopped: "budget", RestoresSkipped: 3,
		BelowRoots: []*themisv1.LaneRoot{{Lane: "overlay", Root: []byte{0xff}}},
		Layers:     []*themisv1.LaneLayers{{Lane: "overlay", Checked: 4, Whiteouts: 1, Opaque: 2}}}
	var found findingLog
	found.add(&themisv1.Finding{Id: "f-1", Kind: "errno-divergence", Detail: "x", Trace: []string{"mkdir d 0755"}})
	tests := []struct {
		name  string
		sum   *themisv1.ExploreSummary
		found *findingLog
		want  string
	}{
		{name: "plain", sum: sum, found: &findingLog{},
			want: `{"search":{"lanes":["ext2"],"depth":2,"branching":0,"ops":null,"seed":7,"time_mode":"TIME_MODE_UNSPECIFIED","policy":""},"session_id":"s-1","states":12,"unique_states":2,"findings":0,"states_per_sec":5.5,"backend":"qemu","revert":"remount","workers":2,"workers_why":"auto: 2 CPUs","sessions":["s-1","s-9"],"elapsed_s":2.25,"max_depth":1,"unique_by_depth":[1,1],"digest":"d","roots":{"ext2":"ab01"},"op_s":1,"fingerprint_s":0.5,"restore_s":0.25,"restores_skipped":0,"finding_list":[],"policy":"auto","judged":"auto (...)\n  directory nlink ignored: btrfs (...)","ops_left_out":["symlink"],"declared_ops":3,"declared_states":4}`},
		{name: "overlay and a finding", sum: overlay, found: &found,
			want: `{"search":{"lanes":["ext2"],"depth":2,"branching":0,"ops":null,"seed":7,"time_mode":"TIME_MODE_UNSPECIFIED","policy":""},"session_id":"s-2","states":0,"unique_states":0,"findings":0,"states_per_sec":0,"backend":"","revert":"","workers":0,"workers_why":"","sessions":null,"stopped":"budget","elapsed_s":0,"max_depth":0,"digest":"","roots":{},"op_s":0,"fingerprint_s":0,"restore_s":0,"restores_skipped":3,"below_roots":{"overlay":"ff"},"layers":[{"lane":"overlay","checked":4,"whiteouts":1,"opaque":2}],"finding_list":[{"id":"f-1","kind":"errno-divergence","detail":"x","trace":["mkdir d 0755"],"found_trace":["mkdir d 0755"],"minimized":false}],"declared_ops":0,"declared_states":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := writeJSON(&b, exploreView(&themisv1.ExploreRequest{Lanes: []string{"ext2"}, Depth: 2, Seed: 7}, tt.sum, tt.found)); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := json.Compact(&got, b.Bytes()); err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("explore --json:\n got %s\nwant %s", got.String(), tt.want)
			}
		})
	}
}
