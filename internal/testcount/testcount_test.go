package testcount

import (
	"regexp"
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	const out = `# build output, not JSON
{"Action":"run","Package":"p","Test":"TestKVMLinuxBoot"}
{"Action":"pass","Package":"p","Test":"TestKVMLinuxBoot"}
{"Action":"skip","Package":"p","Test":"TestKVMLinuxConformance"}
{"Action":"pass","Package":"p","Test":"TestKVMLinuxConformance/Nested"}
{"Action":"fail","Package":"q","Test":"TestOther"}
{"Action":"pass","Package":"p"}
`
	tests := []struct {
		name                 string
		pattern              string
		passed, failed, skip int
		min                  int
		wantErr              string
	}{
		{"gated ones", "^TestKVMLinux", 2, 0, 1, 1, ""},
		{"too few", "^TestKVMLinux", 2, 0, 1, 3, "2 matching tests ran"},
		{"a failure", "Other", 0, 1, 0, 0, "failed"},
		{"none matched", "^TestNothing", 0, 0, 0, 1, "0 matching tests ran"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Count(strings.NewReader(out), regexp.MustCompile(tt.pattern))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Passed) != tt.passed || len(r.Failed) != tt.failed || len(r.Skipped) != tt.skip {
				t.Fatalf("got %+v", r)
			}
			err = r.Check(tt.min)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Check(%d) = %v, want %q", tt.min, err, tt.wantErr)
			}
		})
	}
}

func TestCountLineTooLong(t *testing.T) {
	if _, err := Count(strings.NewReader(strings.Repeat("x", maxLine+1)), regexp.MustCompile(".")); err == nil {
		t.Fatal("a line over the bound was accepted")
	}
}
