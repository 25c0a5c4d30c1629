package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report/reporttest"
)

func TestParseSizes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want []int64
		bad  bool
	}{
		{in: "1,512,4K,16k,1M,2MiB,3KiB", want: []int64{1, 512, 4096, 16384, 1 << 20, 2 << 20, 3 << 10}},
		{in: defaultWriteSizes, want: []int64{1, 512, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}},
		{in: "64M", want: []int64{64 << 20}},
		{in: "65M", bad: true},
		{in: "0", bad: true},
		{in: "-1", bad: true},
		{in: "4X", bad: true},
		{in: "", bad: true},
	} {
		got, err := parseSizes(tt.in)
		if (err != nil) != tt.bad {
			t.Errorf("parseSizes(%q): %v, want error %v", tt.in, err, tt.bad)
			continue
		}
		if diff := cmp.Diff(tt.want, got); !tt.bad && diff != "" {
			t.Errorf("parseSizes(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// TestReportFrom renders saved results without a guest: the JSON lines of
// profile and corrupt, and the report's own JSON, which renders back to the
// same page.
func TestReportFrom(t *testing.T) {
	bin := themisctl(t)
	dir := t.TempDir()
	saved := filepath.Join(dir, "saved")
	if err := os.Mkdir(saved, 0o755); err != nil {
		t.Fatal(err)
	}
	// As `themisctl --json profile` and `themisctl --json corrupt` print them
	// (protojson, proto names: 64-bit integers are strings).
	profile := `{"lane":"ext2","op":"write f 0 1 0x55","bytes":"1","sectors_written":8,"written_lbas":[{"first":"4","count":"2","region":"group-descriptors"},{"first":"1026","count":"2","region":"data"}],"sectors_read":4,"amplification":4096}
{"lane":"ext2","op":"write f 0 4096 0x55","bytes":"4096","sectors_written":14,"written_lbas":[{"first":"4","count":"2","region":"group-descriptors"},{"first":"1026","count":"8","region":"data"}],"sectors_read":10,"amplification":1.75}
{"lane":"ext2","op":"chmod f 0600","sectors_written":2,"written_lbas":[{"first":"74","count":"2","region":"inode-table"}],"sectors_read":2,"amplification":1024}
`
	corrupt := `{"lane":"ext2","target":"superblock.magic","lba":"2","offset":56,"region":"superblock","field":"s_magic","class":"fatal"}
{"lane":"ext2","target":"data:d/f:0:0","lba":"1026","region":"data","mounted":true,"affected":["d/f"],"fsck_clean":true,"class":"silent-content"}
`
	for name, s := range map[string]string{"profile.jsonl": profile, "corrupt.jsonl": corrupt, "notes.txt": "ignored"} {
		if err := os.WriteFile(filepath.Join(saved, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "THEMIS_SOCKET="+filepath.Join(dir, "none.sock"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("themisctl %v: %v\n%s", args, err, stderr.Bytes())
		}
		return out
	}
	figures := func(path string) *reporttest.Figures {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fig, err := reporttest.Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		return fig
	}

	lines := filepath.Join(dir, "lines.html")
	run("report", "--from", saved, "-o", lines)
	got := figures(lines)
	want := &reporttest.Figures{
		// The written view alone, from the rows' sectors: gd 4-5, inode table 74-75, data 1026-1033.
		Layouts:     map[string]reporttest.LayoutMap{"ext2": {ID: "layout-map-0", Runs: 3}},
		Chart:       true,
		ChartPoints: 2, ChartSeries: 1,
		Blast: true, BlastLanes: []string{"ext2"}, BlastRows: 2, BlastCells: 2,
		ProfileRows: 3, DetailRows: 2,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report --from a directory of JSON lines (-want +got):\n%s", diff)
	}

	// The report's own JSON renders back to the same page.
	sample, err := filepath.Abs("../../report/testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(dir, "first.html")
	data := run("--json", "report", "--from", sample, "-o", first)
	var r themisv1.ReportPage
	if err := jsonout.DecodeInto(data, &r); err != nil {
		t.Fatalf("--json: %v\n%s", err, data)
	}
	if len(r.GetLayouts()) != 2 || len(r.GetBlast()) == 0 || len(r.GetProfile()) == 0 || r.GetTitle() == "" {
		t.Errorf("--json data: %d layouts, %d profile rows, %d results", len(r.GetLayouts()), len(r.GetProfile()), len(r.GetBlast()))
	}
	savedJSON := filepath.Join(dir, "report.json")
	if err := os.WriteFile(savedJSON, data, 0o644); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(dir, "second.html")
	run("report", "--from", savedJSON, "-o", second)
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) || len(a) == 0 {
		t.Errorf("the page from --json's data differs from the first (%d vs %d bytes)", len(a), len(b))
	}
	if page := run("report", "--from", savedJSON, "-o", "-"); !bytes.Equal(page, a) {
		t.Errorf("-o - wrote %d bytes, want the page (%d)", len(page), len(a))
	}
}
