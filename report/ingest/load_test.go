package ingest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report"
)

// counts is what a loaded Report holds, in short.
type counts struct {
	Layouts        []string // lanes
	Inferred       []int    // runs of each layout's written view
	Profile, Blast int
	Title          string
}

func countsOf(r *report.Report) counts {
	c := counts{Profile: len(r.Profile), Blast: len(r.Blast), Title: r.Title}
	for _, l := range r.Layouts {
		c.Layouts = append(c.Layouts, l.Lane)
		c.Inferred = append(c.Inferred, len(l.Inferred))
	}
	return c
}

// writeDir makes a directory holding files (name -> content).
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	t.Parallel()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sample, err := filepath.Abs("../testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    func(t *testing.T) string
		want    counts
		wantErr error  // errors.Is
		errText string // or a substring of the error
	}{
		{
			name: "JSON lines of profile and corrupt",
			path: func(t *testing.T) string {
				return writeDir(t, map[string]string{"profile.jsonl": read("profile.jsonl"), "corrupt.jsonl": read("corrupt.jsonl"), "notes.txt": "ignored"})
			},
			// The written view alone: gd 4-5, inode table 74-75, data 1026-1033.
			want: counts{Layouts: []string{"ext2"}, Inferred: []int{3}, Profile: 3, Blast: 2},
		},
		{
			name: "stream messages as grpcurl prints them",
			path: func(t *testing.T) string { return filepath.Join("testdata", "stream.json") },
			want: counts{Layouts: []string{"ext4"}, Inferred: []int{0}, Profile: 1, Blast: 1},
		},
		{
			name: "the report's own JSON",
			path: func(t *testing.T) string { return sample },
			want: countsOf(mustLoadSample(t, sample)),
		},
		{
			name: "the page's data as --json report prints it",
			path: func(t *testing.T) string {
				b, err := jsonout.Encode(Page(mustLoadSample(t, sample)), true)
				if err != nil {
					t.Fatal(err)
				}
				return writeDir(t, map[string]string{"report.json": string(b)})
			},
			want: countsOf(mustLoadSample(t, sample)),
		},
		{name: "a page's unknown field", path: func(t *testing.T) string {
			return writeDir(t, map[string]string{"a.json": `{"schema":"themis.v1.ReportPage","title":"t","bogus":1}`})
		}, errText: "a report's JSON"},
		{name: "missing", path: func(t *testing.T) string { return "/nonexistent/report.json" }, wantErr: os.ErrNotExist},
		{name: "empty dir", path: func(t *testing.T) string { return writeDir(t, map[string]string{"a.txt": "x"}) }, wantErr: ErrNoFiles},
		{name: "no data", path: func(t *testing.T) string { return writeDir(t, map[string]string{"a.json": ""}) }, wantErr: ErrNoData},
		{name: "unknown object", path: func(t *testing.T) string { return writeDir(t, map[string]string{"a.json": `{"lane":"x"}`}) }, errText: "a.json: value 1: not a report"},
		{name: "not an object", path: func(t *testing.T) string { return writeDir(t, map[string]string{"a.json": `{"op":"x"} [1]`}) }, errText: "value 2: want a JSON object"},
		{name: "unknown report field", path: func(t *testing.T) string { return writeDir(t, map[string]string{"a.json": `{"title":"t","bogus":1}`}) }, errText: "a report's JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Load(tt.path(t))
			switch {
			case tt.wantErr != nil || tt.errText != "":
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("Load: %v, want an error (%v, %q)", err, tt.wantErr, tt.errText)
				}
				return
			case err != nil:
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tt.want, countsOf(r)); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

func mustLoadSample(t *testing.T, path string) *report.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := addSaved(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Layouts) == 0 || len(r.Profile) == 0 || len(r.Blast) == 0 || r.Title == "" {
		t.Fatalf("%s: want every part, got %+v", path, countsOf(&r))
	}
	return &r
}

// TestPageRoundTrip: Page and FromPage keep every field the page shows.
func TestPageRoundTrip(t *testing.T) {
	t.Parallel()
	sample, err := filepath.Abs("../testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	want := mustLoadSample(t, sample)
	b, err := jsonout.Encode(Page(want), false)
	if err != nil {
		t.Fatal(err)
	}
	var p themisv1.ReportPage
	if err := jsonout.DecodeInto(b, &p); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, FromPage(&p), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("FromPage(Page(sample)) (-want +got):\n%s", diff)
	}
}
