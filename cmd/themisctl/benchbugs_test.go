package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bugs"
)

func TestPickCases(t *testing.T) {
	all := []bugs.Case{{ID: "a-x"}, {ID: "b-y"}, {ID: "c-z"}}
	for _, tc := range []struct {
		ids  []string
		want string
		err  bool
	}{
		{nil, "a-x,b-y,c-z", false},
		{[]string{"c-z", "a-x"}, "c-z,a-x", false},
		{[]string{"d-w"}, "", true},
	} {
		got, err := pickCases(all, tc.ids)
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		if (err != nil) != tc.err || strings.Join(ids, ",") != tc.want {
			t.Errorf("pickCases(%v) = %v, %v", tc.ids, ids, err)
		}
	}
}

// TestBugsReportEscapes: the page shows every case and baseline, and a
// hostile detail (from a guest: a path, fsck output) is escaped.
func TestBugsReportEscapes(t *testing.T) {
	rep := &bugsReport{Budget: time.Minute, Cases: 3, Detected: 2, Reproduced: 1, Outcomes: []bugs.Outcome{
		{Case: bugs.Case{ID: "exfat-a", Class: "on-disk", FS: "exfat"}, Detected: true, First: 21 * time.Second, FirstPart: "reference exfat", FirstDetail: `<script>alert(1)</script>`,
			Reproduced: true, Repro: `lane exfat: the filesystem refuses to read <b>x</b>`},
		{Case: bugs.Case{ID: "vfat-b", Class: "lost-update", FS: "vfat"}, Findings: 2, InBaseline: 2},
		{Case: bugs.Case{ID: "ext2-c", Class: "crash-consistency", FS: "ext2"}, Detected: true, First: 3 * time.Minute, FirstPart: "crash ext2", FirstKey: "finding|crash|crash lost ext2 after fsync of a file",
			StockClean: "its setup and trace on the stock image: 9 crash states, none lost what the fsync made durable", Findings: 4, InBaseline: 4},
	}, Baselines: []*stockBaseline{{FS: "exfat", Flavor: "cloud", Keys: []string{"clock|exfat|mkdir|mtime|diverged"}}}}
	rep.Medians = bugs.Medians(rep.Outcomes)
	rep.Outcomes[1].Explore = &bugs.Detection{Command: "explore --fs ext2,vfat", States: 22, Elapsed: 4 * time.Second}
	path := filepath.Join(t.TempDir(), "bugs.html")
	if err := writeBugsReport(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"2 of 3 detected, 1 reproduced", "(its key is in the stock baseline; its setup and trace on the stock image: 9 crash states", "yes: lane exfat: the filesystem refuses to read &lt;b&gt;x&lt;/b&gt;", "exfat-a", "vfat-b", `class="missed"`, "21s", "clock|exfat|mkdir|mtime|diverged", "&lt;script&gt;",
		"Plain explore, side by side", "<td>vfat-b</td><td>missed</td><td>explore --fs ext2,vfat</td><td>missed</td><td>22 states in 4s</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") {
		t.Error("a finding's detail is not escaped")
	}
	if got := outcomeText(rep.Outcomes[1]); !strings.Contains(got, "missed (2 finding(s), all in the stock baseline") {
		t.Errorf("outcomeText = %q", got)
	}
	if got := outcomeText(rep.Outcomes[2]); !strings.Contains(got, "a key of the stock baseline; its setup and trace on the stock image") {
		t.Errorf("outcomeText of a stock-clean detection = %q", got)
	}
}

// TestCheckSeenNote: every event is kept; the run is cancelled once, at
// the first event stopAt takes, and never without a stopAt.
func TestCheckSeenNote(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stopAt    func(string) bool
		wantStops int
		wantAfter int // events noted when the cancel came (0: none)
	}{
		{"no stop", nil, 0, 0},
		{"stop at b", func(k string) bool { return k == "b" }, 1, 2},
		{"every key stops, once", func(string) bool { return true }, 1, 1},
	} {
		stops, after := 0, 0
		s := &checkSeen{stopAt: tc.stopAt}
		s.cancel = func() { stops++; after = len(s.events) }
		for _, k := range []string{"a", "b", "c"} {
			s.note(checkEvent{key: k})
		}
		if len(s.events) != 3 || stops != tc.wantStops || after != tc.wantAfter || s.stopped != (tc.wantStops > 0) {
			t.Errorf("%s: %d events, %d cancels after %d, stopped %v", tc.name, len(s.events), stops, after, s.stopped)
		}
	}
}

// TestPrintVersus: plain explore's line per case says when it detected,
// how far a miss went, or its error, and the count.
func TestPrintVersus(t *testing.T) {
	rep := &bugsReport{Outcomes: []bugs.Outcome{
		{Case: bugs.Case{ID: "a"}, Explore: &bugs.Detection{Command: "explore --fs ext2,f2fs", Detected: true, First: 31 * time.Second}},
		{Case: bugs.Case{ID: "b"}, Explore: &bugs.Detection{Command: "explore --fs ext2,udf", States: 22, Elapsed: 4200 * time.Millisecond}},
		{Case: bugs.Case{ID: "c"}, Explore: &bugs.Detection{Command: "explore --fs ext2,udf", Err: "boom"}},
		{Case: bugs.Case{ID: "d"}},
	}}
	var b strings.Builder
	printVersus(&b, rep)
	want := "versus\ta\texplore --fs ext2,f2fs\t31s\n" +
		"versus\tb\texplore --fs ext2,udf\tmissed (22 states in 4s)\n" +
		"versus\tc\texplore --fs ext2,udf\terror: boom\n" +
		"plain explore detected 1 of 3\n"
	if b.String() != want {
		t.Errorf("printVersus:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestWithTriaged: a stock baseline holds the triaged stock findings of
// its filesystem whether or not its run met them, once each, sorted.
func TestWithTriaged(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		fs   string
		want string
	}{
		{nil, "exfat", "clock|exfat|create|mtime|diverged,clock|exfat|mkdir|mtime|diverged,finding|crash|crash lost exfat after fsync of an empty file"},
		{[]string{"clock|exfat|mkdir|mtime|diverged", "finding|kernel|x"}, "exfat", "clock|exfat|create|mtime|diverged,clock|exfat|mkdir|mtime|diverged,finding|crash|crash lost exfat after fsync of an empty file,finding|kernel|x"},
		{[]string{"finding|kernel|x"}, "vfat", "finding|kernel|x"},
	} {
		if got := strings.Join(withTriaged(tc.keys, tc.fs), ","); got != tc.want {
			t.Errorf("withTriaged(%q, %s) = %s, want %s", tc.keys, tc.fs, got, tc.want)
		}
	}
}

// TestBugsReportJSON: --report FILE.json writes the BugsReport --json
// prints, durations in seconds.
func TestBugsReportJSON(t *testing.T) {
	started := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	rep := &bugsReport{Budget: 3 * time.Minute, Cases: 2, Detected: 1, Reproduced: 1, Started: started, Elapsed: 5 * time.Minute,
		Outcomes: []bugs.Outcome{
			{Case: bugs.Case{ID: "exfat-a", Class: "on-disk", FS: "exfat", Flavor: "cloud"}, Detected: true, First: 21 * time.Second,
				FirstKey: "finding|silent-content|x", FirstPart: "reference exfat", Reproduced: true, States: 1 << 40},
			{Case: bugs.Case{ID: "vfat-b", Class: "lost-update", FS: "vfat"}, Findings: 2, InBaseline: 2,
				Explore: &bugs.Detection{Command: "explore --fs ext2,vfat", States: 22, Elapsed: 4 * time.Second}},
		},
		Baselines: []*stockBaseline{{FS: "exfat", Flavor: "cloud", Keys: []string{"clock|exfat|mkdir|mtime|diverged"}, Elapsed: time.Minute}}}
	rep.Medians = bugs.Medians(rep.Outcomes)
	path := filepath.Join(t.TempDir(), "bugs.json")
	if err := writeBugsReport(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got themisv1.BugsReport
	if err := jsonout.DecodeInto(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !proto.Equal(&got, rep.proto()) {
		t.Errorf("--report bugs.json: %v, want %v", &got, rep.proto())
	}
	o := got.GetOutcomes()
	if got.GetBudgetS() != 180 || !got.GetStarted().AsTime().Equal(started) || len(o) != 2 || o[0].GetCase().GetId() != "exfat-a" ||
		o[0].GetFirstS() != 21 || o[0].GetStates() != 1<<40 || o[1].GetExplore().GetElapsedS() != 4 || got.GetBaselines()[0].GetElapsedS() != 60 ||
		len(got.GetMedians()) == 0 || !strings.Contains(string(b), `"schema": "themis.v1.BugsReport"`) {
		t.Errorf("--report bugs.json:\n%s", b)
	}
}

// TestLoadBaselines: --baseline takes an earlier report's stock baselines
// of the same budget, by filesystem and flavour, leaving out one that
// failed; another budget, a missing file or bytes that are not a report
// are refused, naming the flag.
func TestLoadBaselines(t *testing.T) {
	dir := t.TempDir()
	started := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	earlier := &bugsReport{Budget: 10 * time.Minute, Started: started, Baselines: []*stockBaseline{
		{FS: "vfat", Flavor: "cloud", Image: "abc123", Keys: []string{"k1"}, Findings: 1, Elapsed: 10 * time.Minute},
		{FS: "udf", Flavor: "cloud", Err: "stock image: no space"},
	}}
	good := filepath.Join(dir, "earlier.json")
	if err := writeBugsReport(good, earlier); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.json")
	if err := os.WriteFile(junk, []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		path    string
		budget  time.Duration
		want    []string // keys of the map
		wantErr string
	}{
		{"none", "", time.Minute, nil, ""},
		{"same budget", good, 10 * time.Minute, []string{"vfat/cloud"}, ""},
		{"other budget", good, 3 * time.Minute, nil, "its budget is 10m0s, this run's 3m0s"},
		{"missing", filepath.Join(dir, "nope.json"), time.Minute, nil, "--baseline"},
		{"not a report", junk, time.Minute, nil, "--baseline " + junk},
	} {
		got, err := loadBaselines(tc.path, tc.budget)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		keys := slices.Sorted(maps.Keys(got))
		if !slices.Equal(keys, tc.want) {
			t.Errorf("%s: baselines %v, want %v", tc.name, keys, tc.want)
		}
		if b := got["vfat/cloud"]; b != nil && (b.Image != "abc123" || b.Findings != 1 || !slices.Equal(b.Keys, []string{"k1"}) ||
			!strings.Contains(b.From, "earlier.json, run of 2026-12-05T09:00:00Z")) {
			t.Errorf("%s: vfat baseline %+v", tc.name, b)
		}
	}
}
