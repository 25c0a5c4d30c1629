package junit

import (
	"bytes"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var findings = []Finding{
	{ID: "f-1", Kind: "errno-divergence", Detail: `symlink f-00 f-02: ext2 0, vfat 1 (EPERM) <&"]]>`, Signature: "errno-divergence symlink", Trace: []string{"symlink f-00 f-02"}},
	{ID: "f-2", Kind: "errno-divergence", Detail: "symlink d-00/f-00 f-03: ext2 0, vfat 1", Signature: "errno-divergence symlink", Trace: []string{"mkdir d-00 0755", "symlink d-00/f-00 f-03"}},
	{ID: "f-3", Kind: "state-divergence", Detail: "lanes ext2 and vfat differ at f-01: mode 420 != 493", Signature: "state-divergence chmod mode"},
	{ID: "f-4", Kind: "self-reference:remount", Detail: "ext2: / differs after a remount", Lane: "ext2"},
	{ID: "f-5", Kind: "guest-died", Detail: "the guest died"},
}

// TestWrite checks the report's cases: one per signature (two findings
// share one), one per lane (ext2 fails by its own finding, vfat passes),
// counts that add up, and text that survives XML.
func TestWrite(t *testing.T) {
	tests := []struct {
		name           string
		run            Run
		tests, failing int
	}{
		{"findings", Run{Name: "explore ext2,vfat", Lanes: []string{"ext2", "vfat"}, Findings: findings, Seconds: 12.5,
			Properties: map[string]string{"policy": "auto", "digest": "ab"}}, 5, 4},
		{"clean", Run{Name: "explore ext2,btrfs", Lanes: []string{"ext2", "btrfs"}}, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tt.run); err != nil {
				t.Fatal(err)
			}
			var doc suites
			if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatalf("%v\n%s", err, b.Bytes())
			}
			s := doc.Suites[0]
			failing := 0
			for _, c := range s.Cases {
				if c.Failure != nil {
					failing++
				}
			}
			if s.Tests != tt.tests || len(s.Cases) != tt.tests || s.Failures != tt.failing || failing != tt.failing || doc.Failures != tt.failing {
				t.Errorf("tests %d (%d cases), failures %d (%d failing, %d in all): want %d and %d\n%s",
					s.Tests, len(s.Cases), s.Failures, failing, doc.Failures, tt.tests, tt.failing, b.Bytes())
			}
			validate(t, b.Bytes())
		})
	}
	var b bytes.Buffer
	if err := Write(&b, tests[0].run); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`name="finding errno-divergence symlink"`, "f-1 errno-divergence", "f-2 errno-divergence", "themisctl findings export f-2",
		`name="lane vfat" classname="themis.explore.ext2,vfat" time="0"></testcase>`, "1 finding(s) on lane ext2 alone", `name="finding guest-died f-5"`,
		`&lt;&amp;&#34;]]&gt;`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// validate checks a report against the JUnit schema the common CI systems
// read (testdata/junit.xsd) with xmllint.
func validate(t *testing.T, doc []byte) {
	t.Helper()
	bin, err := exec.LookPath("xmllint")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("xmllint not installed (Debian libxml2-utils)")
		}
		t.Skip("xmllint not installed (Debian libxml2-utils)")
	}
	p := filepath.Join(t.TempDir(), "report.xml")
	if err := os.WriteFile(p, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--noout", "--schema", "testdata/junit.xsd", p).CombinedOutput(); err != nil {
		t.Errorf("xmllint: %v\n%s\n%s", err, out, doc)
	}
}
