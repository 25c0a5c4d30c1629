package fuzzseed

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Seeds returns Frames, failing t if they cannot be built.
func Seeds(t testing.TB) [][]byte {
	t.Helper()
	seeds, err := Frames()
	if err != nil {
		t.Fatal(err)
	}
	return seeds
}

// corpusFile is the go test fuzz v1 file of one seed.
func corpusFile(seed []byte) []byte {
	return []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed))
}

// CheckCorpus checks that dir (testdata/fuzz/<target>) holds exactly the
// seeds of Frames, as seed-NN files; with update it writes them first.
func CheckCorpus(t *testing.T, dir string, update bool) {
	t.Helper()
	seeds := Seeds(t)
	if update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), corpusFile(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("seed corpus: %v", err)
	}
	if len(ents) != len(seeds) {
		t.Errorf("%s: %d files, want the %d seeds (run with -update)", dir, len(ents), len(seeds))
	}
	for i, s := range seeds {
		p := filepath.Join(dir, fmt.Sprintf("seed-%02d", i))
		got, err := os.ReadFile(p)
		if err != nil || string(got) != string(corpusFile(s)) {
			t.Errorf("%s: not seed %d of fuzzseed.Frames (%v; run with -update)", p, i, err)
		}
	}
}
