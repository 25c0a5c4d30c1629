package bugs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCorpus: every case of the corpus in this directory loads and checks
// (fields, patch under fs/), and re-creations are at most a quarter.
func TestCorpus(t *testing.T) {
	cases, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 12 {
		t.Fatalf("%d cases, want at least the first 12", len(cases))
	}
	re := 0
	for _, c := range cases {
		if c.Kind == KindRecreation {
			re++
		}
	}
	if 4*re > len(cases) {
		t.Errorf("%d re-creations of %d cases: at most a quarter", re, len(cases))
	}
}

func TestCaseCheck(t *testing.T) {
	good := Case{ID: "exfat-x-y", FS: "exfat", Flavor: "cloud", Class: "on-disk", Kind: KindRevert, Fix: "abc", Reference: "u", Summary: "s"}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.patch", "--- a/fs/exfat/inode.c\n+++ b/fs/exfat/inode.c\n@@ -1 +1 @@\n-a\n+b\n")
	for _, tc := range []struct {
		name string
		edit func(*Case)
		want string // "" ok, else in the error
	}{
		{"good", func(*Case) {}, ""},
		{"id not of its fs", func(c *Case) { c.ID = "vfat-x" }, "start with its fs"},
		{"bad id", func(c *Case) { c.ID = "exfat_X" }, "id"},
		{"flavor", func(c *Case) { c.Flavor = "rt" }, "flavor"},
		{"class", func(c *Case) { c.Class = "perf" }, "class"},
		{"kind", func(c *Case) { c.Kind = "guess" }, "kind"},
		{"no fix", func(c *Case) { c.Fix = "" }, "required"},
		{"patch outside fs", func(c *Case) { c.Patch = write("mm.patch", "--- a/mm/x.c\n+++ b/mm/x.c\n") }, "only files under fs/"},
		{"patch climbing out", func(c *Case) { c.Patch = write("up.patch", "--- a/fs/../mm/x.c\n+++ b/fs/../mm/x.c\n") }, "only files under fs/"},
		{"empty patch", func(c *Case) { c.Patch = write("empty.patch", "nothing\n") }, "no file"},
		{"no patch", func(c *Case) { c.Patch = filepath.Join(dir, "none") }, "patch"},
	} {
		c := good
		c.Patch = ok
		tc.edit(&c)
		err := c.Check()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestLoadRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	cd := filepath.Join(dir, "exfat-a-b")
	if err := os.MkdirAll(cd, 0o755); err != nil {
		t.Fatal(err)
	}
	toml := "id = \"exfat-a-b\"\nfs = \"exfat\"\nflavor = \"cloud\"\nclass = \"on-disk\"\nkind = \"revert\"\nfix = \"f\"\nreference = \"r\"\nsummary = \"s\"\ncommand = \"explore --fsck\"\n"
	if err := os.WriteFile(filepath.Join(cd, "case.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cd, "bug.patch"), []byte("--- a/fs/exfat/x.c\n+++ b/fs/exfat/x.c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "command") {
		t.Errorf("a case with a command of its own loaded: %v", err)
	}
}

func TestKeysAndMedians(t *testing.T) {
	if CellKey("exfat", "mkdir", "mtime", "diverged(guest 1.03, after remount 1.02)") != CellKey("exfat", "mkdir", "mtime", "diverged(guest 7.05, after remount 7.04)") {
		t.Error("two diverged cells of one op and field have different keys")
	}
	if CellKey("exfat", "mkdir", "mtime", "diverged(x)") == CellKey("exfat", "mkdir", "mtime", "kernel-crash") {
		t.Error("a kernel crash has a diverged cell's key")
	}
	out := []Outcome{
		{Case: Case{Class: "timestamps"}, Detected: true, First: 10 * time.Second},
		{Case: Case{Class: "timestamps"}, Detected: true, First: 30 * time.Second},
		{Case: Case{Class: "timestamps"}},
		{Case: Case{Class: "on-disk"}, Detected: true, First: 50 * time.Second},
	}
	got := Medians(out)
	want := []ClassMedian{
		{Class: "timestamps", Cases: 3, Detected: 2, Median: 20 * time.Second},
		{Class: "on-disk", Cases: 1, Detected: 1, Median: 50 * time.Second},
		{Class: "all", Cases: 4, Detected: 3, Median: 30 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("medians %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("median %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestTriagedKeys: the triaged stock findings of a filesystem are its
// keys only, in the form a clock cell's or a finding's key takes.
func TestTriagedKeys(t *testing.T) {
	for _, tc := range []struct {
		fs   string
		want []string
	}{
		{"exfat", []string{"clock|exfat|create|mtime|diverged", "clock|exfat|mkdir|mtime|diverged", "finding|crash|crash lost exfat after fsync of an empty file"}},
		{"ext2", []string{"finding|crash|crash lost ext2 after fsync of an empty file", "finding|crash|crash lost ext2 after fsync of a file", "finding|crash|crash lost ext2 after fsync of a directory", "finding|crash|crash lost ext2 after fdatasync of a file"}},
		{"f2fs", []string{"finding|crash|crash lost f2fs after fsync of a file"}},
		{"vfat", nil},
	} {
		if got := TriagedKeys(tc.fs); !slices.Equal(got, tc.want) {
			t.Errorf("TriagedKeys(%s) = %q, want %q", tc.fs, got, tc.want)
		}
	}
}

// TestInBaseline: a key is in a baseline when the baseline holds it, or a
// FindingKindKey of its kind; a kind's key stands for no other kind.
func TestInBaseline(t *testing.T) {
	t.Parallel()
	base := []string{FindingKey("unreadable", "unreadable|3|write_far|read_errno"), FindingKindKey("seek-answer")}
	for _, tt := range []struct {
		key  string
		want bool
	}{
		{FindingKey("unreadable", "unreadable|3|write_far|read_errno"), true},
		{FindingKey("unreadable", "unreadable|4|write_far|read_errno"), false},
		{FindingKey("seek-answer", "seek-answer|2|chmod|seek"), true},
		{FindingKey("seek-answer", "seek-answer|5|write_far|seek"), true},
		{FindingKey("seek-answers", "x"), false},
		{FindingKey("state-divergence", "seek-answer"), false},
		{CellKey("btrfs", "create", "mtime", "diverged"), false},
	} {
		if got := InBaseline(base, tt.key); got != tt.want {
			t.Errorf("InBaseline(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}
