package arch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPurePackagesStayPure(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		"github.com/themisfs/themis/vmm",
		"google.golang.org/grpc",
		"os/exec",
	}
	checked := 0
	for _, pkg := range []string{"explore", "oracle", "clock", "fsimage", "fsimage/btrfs", "report"} {
		if _, err := os.Stat(filepath.Join(root, pkg, "doc.go")); err != nil {
			continue // not written yet
		}
		cmd := exec.Command("go", "list", "-deps", "./"+pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", pkg, err)
		}
		checked++
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s imports %s (directly or not): pure packages must not", pkg, dep)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no pure package found to check")
	}
}
