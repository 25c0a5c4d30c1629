package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestDiffFilesJSON: `diff A B --json` of two image files prints the
// DiffResponse the daemon's Diff answers.
func TestDiffFilesJSON(t *testing.T) {
	bin := themisctl(t)
	dir := t.TempDir()
	a, b := make([]byte, 8192), make([]byte, 8192)
	b[1500], b[1501], b[7000] = 1, 2, 3
	for name, data := range map[string][]byte{"a.img": a, "b.img": b} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin, "--json", "diff", filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")).Output()
	if err != nil {
		t.Fatalf("diff --json: %v", err)
	}
	var d themisv1.DiffResponse
	if err := jsonout.DecodeInto(out, &d); err != nil {
		t.Fatalf("diff --json: %v\n%s", err, out)
	}
	r := d.GetRanges()
	if d.GetRawSectors() != 2 || d.GetNormalized() || len(r) != 2 || r[0].GetOffset() != 1500 || r[0].GetLen() != 2 || r[1].GetOffset() != 7000 {
		t.Errorf("diff --json: %s", out)
	}
}
