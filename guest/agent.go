package guest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"go.uber.org/zap"
)

// modulePath is the Go module whose source tree holds cmd/themis-agent.
const modulePath = "github.com/themisfs/themis"

// agentPackage is the agent's import path relative to the module root.
const agentPackage = "./cmd/themis-agent"

// SourceDir returns the root of the Themis source tree: $THEMIS_SOURCE_DIR
// if set, else the nearest directory at or above this package's source file,
// or else above the working directory, whose go.mod declares module
// github.com/themisfs/themis.
func SourceDir() (string, error) {
	if d := os.Getenv("THEMIS_SOURCE_DIR"); d != "" {
		ok, err := isModuleRoot(d)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("guest: THEMIS_SOURCE_DIR=%s has no go.mod for module %s", d, modulePath)
		}
		return filepath.Abs(d)
	}
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, start := range starts {
		for d := start; ; d = filepath.Dir(d) {
			ok, err := isModuleRoot(d)
			if err != nil {
				return "", err
			}
			if ok {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("guest: cannot find the %s source tree (searched up from %s); set THEMIS_SOURCE_DIR or pass a prebuilt agent", modulePath, strings.Join(starts, " and "))
}

// isModuleRoot reports whether dir/go.mod declares modulePath.
func isModuleRoot(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("guest: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("guest: read %s: %w", f.Name(), err)
	}
	return false, nil
}

// buildAgent compiles pkg (relative to the source root, e.g.
// cmd/themis-agent) as a static linux/amd64 binary and returns its bytes.
// tmpParent is where the temporary output goes.
func buildAgent(ctx context.Context, log *zap.Logger, tmpParent, pkg string) ([]byte, error) {
	tmp, err := os.MkdirTemp(tmpParent, ".agent-")
	if err != nil {
		return nil, fmt.Errorf("guest: build agent: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "themis-agent")
	log.Debug("building agent", zap.String("package", pkg))
	if err := BuildStatic(ctx, pkg, out, false); err != nil {
		return nil, fmt.Errorf("guest: build agent: %w", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("guest: build agent: %w", err)
	}
	return b, nil
}

// GoTool finds the go command: in PATH, else in this binary's GOROOT.
func GoTool() (string, error) {
	goBin, err := exec.LookPath("go")
	if err == nil {
		return goBin, nil
	}
	alt := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, serr := os.Stat(alt); serr != nil {
		return "", fmt.Errorf("go toolchain not found in PATH or GOROOT: %w", err)
	}
	return alt, nil
}

// BuildStatic builds pkg of the source tree (see SourceDir) as a static
// linux/amd64 binary at out (CGO_ENABLED=0, -trimpath, -s -w): for machines
// with no libc of their own for it. test builds the package's test binary
// (go test -c) instead.
func BuildStatic(ctx context.Context, pkg, out string, test bool) error {
	src, err := SourceDir()
	if err != nil {
		return err
	}
	goBin, err := GoTool()
	if err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-trimpath", "-ldflags=-s -w", "-o", out, pkg}
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s in %s: %w: %s", strings.Join(args, " "), src, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// checkAgent verifies that b is a static x86-64 ELF executable: the guest
// has no dynamic loader or libc.
func checkAgent(b []byte, name string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("guest: agent %s is not an ELF executable: %w", name, err)
	}
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("guest: agent %s is built for %v, want x86-64", name, f.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("guest: agent %s is an ELF %v, want an executable", name, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("guest: agent %s is dynamically linked; build it with CGO_ENABLED=0", name)
		}
	}
	return nil
}
