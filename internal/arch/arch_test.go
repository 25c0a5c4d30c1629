package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	for _, pkg := range []string{"api", "explore", "oracle", "clock", "family", "fsimage", "fsimage/btrfs", "fsimage/xfs", "fsimage/nilfs2", "report", "runreport", "junit", "crash"} {
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

// TestSessionHoldsNoRuns: session is the daemon's core (sessions,
// checkpoints, pools, ops, the ledger); the experiments over it live in
// runs/... and session reaches none of them, nor what only they need:
// oracle (the fingerprint fold: the runs' and the in-guest agent's,
// agent/inguest, whose Server session does not reach) and fsimage (the
// base images' btrfs pinning, guest/baseimage, which session and launch
// take as a launch.BaseMaker).
func TestSessionHoldsNoRuns(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	list := func(format string) []string {
		t.Helper()
		cmd := exec.Command("go", "list", "-f", format, "./session")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list ./session: %v", err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/themisfs/themis/"
	for _, tt := range []struct {
		what      string
		format    string
		forbidden []string
	}{
		{"reaches", `{{join .Deps " "}}`, []string{mod + "explore", mod + "opspec", mod + "oracle", mod + "clock", mod + "fsimage",
			mod + "runs", mod + "guest/baseimage", mod + "agent/inguest", "google.golang.org/grpc"}},
	} {
		deps := list(tt.format)
		if len(deps) == 0 {
			t.Fatalf("go list: session %s nothing", tt.what)
		}
		for _, dep := range deps {
			for _, f := range tt.forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("session %s %s: it must not (runs live in runs/...)", tt.what, dep)
				}
			}
		}
	}
}

// TestEveryPackageHasItsRow: docs/architecture.md's table of rooms names
// every package of the module (a row starting with it, or one naming it
// beside another: "| `internal/nested`, `cmd/themis-nested-init` ...").
func TestEveryPackageHasItsRow(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		if !strings.HasPrefix(line, "| `") || !ok {
			continue
		}
		for _, name := range strings.Split(first, ", ") {
			rows[strings.Trim(name, "`")] = true
		}
	}
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list ./... gave %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		if rel := strings.TrimPrefix(p, "github.com/themisfs/themis/"); !rows[rel] {
			t.Errorf("docs/architecture.md has no row for package %s", rel)
		}
	}
}

// maxFuncLines is the longest a non-test function may be (docs/style.md:
// functions that fit on a screen); longFuncs are the exceptions, each with
// its reason.
const maxFuncLines = 100

var longFuncs = map[string]string{
	"agent/inguest/ops_linux.go:handle": "the agent's request switch: one case per operation, each a call",
}

// TestFunctionsFitOnAScreen: no non-test function of the module (generated
// code aside) is longer than maxFuncLines, but the exceptions named.
func TestFunctionsFitOnAScreen(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if _, ok := longFuncs[rel+":"+fn.Name.Name]; n > maxFuncLines && !ok {
				t.Errorf("%s: func %s is %d lines, more than %d", rel, fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files: want the module's", files)
	}
}

// TestCLIReachesTheDaemonThroughItsAPI: cmd/themisctl imports no package
// of the daemon's side (server, session, runs/...): it speaks the API
// through client, and starts a daemon (embedded, or themisctl daemon)
// through package embedded alone.
func TestCLIReachesTheDaemonThroughItsAPI(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "./cmd/themisctl")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./cmd/themisctl: %v", err)
	}
	const mod = "github.com/themisfs/themis/"
	imports := strings.Fields(string(out))
	if len(imports) < 10 {
		t.Fatalf("go list: cmd/themisctl imports %d packages", len(imports))
	}
	for _, imp := range imports {
		rel, ok := strings.CutPrefix(imp, mod)
		daemon := rel == "server" || rel == "session" || strings.HasPrefix(rel, "runs/")
		if ok && daemon {
			t.Errorf("cmd/themisctl imports %s: the CLI reaches the daemon through its API (client), and starts one through package embedded", rel)
		}
	}
	if !slices.Contains(imports, mod+"embedded") {
		t.Errorf("cmd/themisctl does not import embedded: how does it start its embedded daemon?")
	}
}

// vmmSupport are the packages that serve the VMM's tests and benchmarks,
// not the VMM: vmm/kvm's production files import neither.
var vmmSupport = []string{"vmm/kvm/x86asm", "vmm/kvm/echo"}

// supportName matches a top-level name of assembler or echo code.
var supportName = regexp.MustCompile(`(?i)echo|^asm$|assembl`)

// TestVMMHoldsOnlyTheVMM: vmm/kvm's non-test files hold no assembler and
// no echo guest — they import neither support package and declare
// nothing named for them; the synthetic guests' code lives in
// vmm/kvm/x86asm and vmm/kvm/echo.
func TestVMMHoldsOnlyTheVMM(t *testing.T) {
	dir, err := filepath.Abs("../../vmm/kvm")
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files++
		name := filepath.Base(path)
		for _, imp := range f.Imports {
			for _, s := range vmmSupport {
				if strings.Trim(imp.Path.Value, `"`) == "github.com/themisfs/themis/"+s {
					t.Errorf("vmm/kvm/%s imports %s: test support, not the VMM", name, s)
				}
			}
		}
		for _, n := range topLevelNames(f) {
			if supportName.MatchString(n) {
				t.Errorf("vmm/kvm/%s declares %s: assembler or echo code belongs in %v", name, n, vmmSupport)
			}
		}
	}
	if files < 10 {
		t.Fatalf("read %d files of vmm/kvm: want the package's", files)
	}
}

// topLevelNames are f's top-level functions, methods, types, constants
// and variables.
func topLevelNames(f *ast.File) []string {
	var out []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			out = append(out, d.Name.Name)
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch s := sp.(type) {
				case *ast.TypeSpec:
					out = append(out, s.Name.Name)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	return out
}
