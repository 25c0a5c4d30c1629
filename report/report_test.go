package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/themisfs/themis/report/reporttest"
)

var update = flag.Bool("update", false, "rewrite testdata/sample.html")

// sample is the hand-made testdata/sample.json (two lanes, edge cases).
func sample(t *testing.T) *Report { return load(t, "testdata/sample.json") }

// load reads a report's JSON; testdata/ext2.json is a real
// `themisctl --json report --fs ext2`.
func load(t *testing.T, name string) *Report {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func render(t *testing.T, r *Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// want is the structure a report's data implies, counted naively.
func want(r *Report) *reporttest.Figures {
	f := &reporttest.Figures{Layouts: map[string]reporttest.LayoutMap{}}
	for i, l := range r.Layouts {
		m := reporttest.LayoutMap{ID: fmt.Sprintf("layout-map-%d", i)}
		for _, p := range l.Parsed {
			if p.Count > 0 {
				m.Regions++
				m.RegionRows++
			}
		}
		for _, p := range l.Inferred {
			if p.Count > 0 {
				m.Runs++
			}
		}
		f.Layouts[l.Lane] = m
	}
	lanes := map[string]bool{}
	for _, p := range r.Profile {
		if p.Bytes > 0 && p.Errno == 0 && p.SectorsWritten > 0 {
			f.ChartPoints++
			lanes[p.Lane] = true
		}
	}
	f.ChartSeries = len(lanes)
	f.Chart = f.ChartPoints > 0
	f.ProfileRows = len(r.Profile)
	targets := map[string]bool{}
	cells := map[[2]string]bool{}
	for _, b := range r.Blast {
		if !lanes[b.Lane+"\x00blast"] {
			lanes[b.Lane+"\x00blast"] = true
			f.BlastLanes = append(f.BlastLanes, b.Lane)
		}
		targets[b.Target] = true
		cells[[2]string{b.Target, b.Lane}] = true
	}
	f.Blast = len(r.Blast) > 0
	f.BlastRows, f.BlastCells, f.DetailRows = len(targets), len(cells), len(r.Blast)
	return f
}

func TestRenderStructure(t *testing.T) {
	t.Parallel()
	full := sample(t)
	noParsed := &Report{Layouts: []Layout{{Lane: "ext2", Inferred: []Range{{4, 2, "group-descriptors"}, {1026, 2, "data"}}}}}
	failed := &Report{Profile: []ProfileRow{
		{Lane: "ext2", Op: "write f 0 1 0x55", Bytes: 1, SectorsWritten: 8},
		{Lane: "ext2", Op: "write nodir/f 0 1 0x55", Bytes: 1, Errno: 2},
		{Lane: "ext2", Op: "chmod f 0600", SectorsWritten: 2},
	}}
	oneLaneBlast := &Report{Blast: []BlastResult{
		{Lane: "ext4", Target: "superblock.magic", LBA: 2, Offset: 56, Class: "fatal"},
		{Lane: "ext2", Target: "data:d/f:0:0", LBA: 1026, Mounted: true, Class: "silent-content"},
		{Lane: "ext2", Target: "gd.bg_inode_table", LBA: 4, Mounted: true, Class: "weird"},
	}}
	notApplicable := &Report{Blast: []BlastResult{
		{Lane: "ext2", Target: "data:d/f:0:0", LBA: 1026, Mounted: true, Class: "silent-content"},
		{Lane: "btrfs", Target: "data:d/f:0:0", LBA: 10344, Region: "data+metadata", Mounted: true, ReadErrno: 5, Class: "detected"},
		{Lane: "ext2", Target: "superblock.magic", LBA: 2, Offset: 56, Class: "fatal"},
		{Lane: "btrfs", Target: "superblock.magic", Field: "btrfs has no ext2/3/4 superblock field", Class: "n/a"},
	}}
	for _, tt := range []struct {
		name string
		r    *Report
	}{
		{"sample", full},
		{"ext2 measured", load(t, "testdata/ext2.json")},
		{"empty", &Report{}},
		{"nil", nil},
		{"layout without the parsed view", noParsed},
		{"failed and metadata rows", failed},
		{"blast only, ragged", oneLaneBlast},
		{"blast with n/a", notApplicable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			page := render(t, tt.r)
			got, err := reporttest.Parse(bytes.NewReader(page))
			if err != nil {
				t.Fatal(err)
			}
			r := tt.r
			if r == nil {
				r = &Report{}
			}
			if diff := cmp.Diff(want(r), got); diff != "" {
				t.Errorf("figures (-want +got):\n%s", diff)
			}
			if got.Scripts != 0 || len(got.External) != 0 {
				t.Errorf("not self-contained: %d scripts, external %v", got.Scripts, got.External)
			}
			for _, s := range []string{`<section id="layout">`, `<section id="amplification">`, `<section id="blast">`, "<style>"} {
				if !bytes.Contains(page, []byte(s)) {
					t.Errorf("page lacks %s", s)
				}
			}
		})
	}
}

func TestRenderEscapes(t *testing.T) {
	t.Parallel()
	page := string(render(t, sample(t)))
	if strings.Contains(page, "<script>") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the target <script>alert(1)</script> is not escaped as text")
	}
}

func TestRenderDeterministic(t *testing.T) {
	t.Parallel()
	a, b := render(t, sample(t)), render(t, sample(t))
	if !bytes.Equal(a, b) {
		t.Fatal("two renders of one report differ")
	}
}

// TestRenderGolden compares the sample's page with testdata/sample.html
// (go test ./report -run Golden -update rewrites it).
func TestRenderGolden(t *testing.T) {
	t.Parallel()
	got := render(t, sample(t))
	path := filepath.Join("testdata", "sample.html")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("page differs from %s (run with -update after checking the change)", path)
	}
}

// TestAxis checks the layout map's scale on random layouts against what it
// must be: monotonic, from x0 to x0+w, every region at least a visible
// width, and a region's sectors inside its own segment.
func TestAxis(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		var parsed []Range
		var lba uint64
		for range 1 + rng.IntN(40) {
			if rng.IntN(8) == 0 {
				lba += uint64(rng.IntN(50)) // a gap
			}
			n := uint64(1 + rng.IntN(1+rng.IntN(20000)))
			parsed = append(parsed, Range{First: lba, Count: n, Region: "data"})
			lba += n
		}
		total := lba + uint64(rng.IntN(3)*100)
		rng.Shuffle(len(parsed), func(a, b int) { parsed[a], parsed[b] = parsed[b], parsed[a] })
		const x0, w = 10.0, 900.0
		ax := newAxis(parsed, total, x0, w)
		if got := ax.x(0); got != x0 {
			t.Fatalf("case %d: x(0) = %v, want %v", i, got, x0)
		}
		if got := ax.x(total); got < x0+w-1e-6 || got > x0+w+1e-6 {
			t.Fatalf("case %d: x(total) = %v, want %v", i, got, x0+w)
		}
		prev := -1.0
		for _, l := range []uint64{0, 1, total / 3, total / 2, total - 1, total} {
			if x := ax.x(l); x < prev {
				t.Fatalf("case %d: x(%d) = %v < %v: not monotonic", i, l, x, prev)
			} else {
				prev = x
			}
		}
		minW := min(6, w*0.35/float64(len(ax.segs)))
		for _, p := range parsed {
			if x0, x1 := ax.x(p.First), ax.x(p.End()); x1-x0 < minW-1e-9 {
				t.Fatalf("case %d: region %+v drawn %v wide, want at least %v", i, p, x1-x0, minW)
			}
		}
	}
}

// TestChromium has headless Chromium load the sample page from a file
// with the network off and checks the DOM it built has the three figures.
func TestChromium(t *testing.T) {
	t.Parallel()
	chromium := reporttest.Chromium(t)
	r := sample(t)
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, render(t, r), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := reporttest.DumpDOM(t, chromium, file)
	got, err := reporttest.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(r), got); diff != "" {
		t.Errorf("figures in Chromium's DOM (-want +got):\n%s", diff)
	}
	for _, id := range []string{`id="layout-map-0"`, `id="layout-map-1"`, `id="amplification-curve"`, `id="blast-radius"`} {
		if !strings.Contains(dom, id) {
			t.Errorf("Chromium's DOM lacks %s", id)
		}
	}
}

// TestRenderNotApplicable: an n/a cell says why and names no LBA, with a
// CSS class that is a valid identifier; its details row shows no bit.
func TestRenderNotApplicable(t *testing.T) {
	t.Parallel()
	page := string(render(t, &Report{Blast: []BlastResult{
		{Lane: "btrfs", Target: "superblock.magic", Field: "btrfs has no ext2/3/4 superblock field", Class: "n/a"},
	}}))
	for _, s := range []string{
		`<td class="c-na" title="btrfs has no ext2/3/4 superblock field">n/a<small></small></td>`,
		`<td>btrfs</td><td>superblock.magic</td><td>-</td>`,
		`n/a (1): the lane&#39;s filesystem has no such structure`,
	} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %s", s)
		}
	}
	if strings.Contains(page, "LBA 0") {
		t.Error("an n/a cell names an LBA")
	}
}
