package runreport

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/themisfs/themis/report/reporttest"
)

func sample() *Run {
	return &Run{
		Title:         "explore ext2,vfat depth 1 seed 7",
		Config:        [][2]string{{"lanes", "ext2, vfat"}, {"depth", "1"}, {"policy", "auto"}},
		Figures:       [][2]string{{"states", "36"}, {"unique states", "10"}},
		Progress:      []Point{{Seconds: 0.5, States: 4, Unique: 2}, {Seconds: 2, States: 20, Unique: 7}, {Seconds: 4.25, States: 36, Unique: 10}},
		UniqueByDepth: []int64{1, 9},
		Findings: []Finding{
			{ID: "f-1", Kind: "errno-divergence", Detail: `symlink f-00 f-02: <script>alert(1)</script>`, Path: "f-02", Field: "missing",
				Trace: []string{"symlink f-00 f-02"}, Minimized: true, Lanes: []LaneErrno{{"ext2", 0}, {"vfat", 1}},
				Footprint: []LaneFootprint{{Lane: "ext2", Sectors: 24, ByRegion: []RegionSectors{{"inode-table", 16}, {"data", 8}}}, {Lane: "vfat", Errno: 1}}},
			{ID: "f-2", Kind: "errno-divergence", Detail: "again", Trace: []string{"mkdir d-00 0755", "symlink f-00 f-02"}, DuplicateOf: "f-1",
				FootprintNote: "not measured: a duplicate"},
		},
	}
}

func render(t *testing.T, r *Run) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRender(t *testing.T) {
	tests := []struct {
		name    string
		run     *Run
		want    []string
		notWant []string
	}{
		{"findings", sample(), []string{`id="states-over-time"`, `id="run-config"`, `data-id="f-1"`, `data-id="f-2"`, `href="#f-1"`,
			"vfat: errno 1", "themisctl findings export f-1", "&lt;script&gt;", "(as found)", `<polyline class="states"`,
			`data-depth="1"`, `data-lane="ext2">ext2: 24<br>&nbsp;&nbsp;inode-table 16<br>&nbsp;&nbsp;data 8</div>`, `vfat: 0 (errno 1)`, "not measured: a duplicate", `aria-label="9 states"`, `<rect width="320.0"`, `<rect width="35.6"`},
			[]string{"<script>", "http://", "https://"}},
		{"clean", &Run{Title: "explore ext2,btrfs"}, []string{"No progress was reported.", "None: every lane agreed", "did not report its states by depth"}, []string{`id="findings"`, "<svg", `id="unique-by-depth"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := string(render(t, tt.run))
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(page, w) {
					t.Errorf("page has %q", w)
				}
			}
		})
	}
	if !bytes.Equal(render(t, sample()), render(t, sample())) {
		t.Error("the same run rendered twice differs")
	}
}

// TestChromium loads the page in headless Chromium: its DOM has the chart
// and a row per finding.
func TestChromium(t *testing.T) {
	chromium := reporttest.Chromium(t)
	file := filepath.Join(t.TempDir(), "run.html")
	if err := os.WriteFile(file, render(t, sample()), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := reporttest.DumpDOM(t, chromium, file)
	for _, want := range []string{`<svg id="states-over-time"`, `data-id="f-1"`, `data-id="f-2"`, `<polyline class="unique"`, `<tr class="depth" data-depth="1">`} {
		if !strings.Contains(dom, want) {
			t.Errorf("Chromium's DOM lacks %s", want)
		}
	}
}
