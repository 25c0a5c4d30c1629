package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// runTool runs a host tool in dir and returns its stdout; a failure carries
// the tool's stderr.
func runTool(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	bin, err := lookTool(name)
	if err != nil {
		return nil, err
	}
	return execTool(ctx, dir, nil, bin, args...)
}

// runToolEnv runs bin with exactly the environment env; output is dropped
// unless it fails.
func runToolEnv(ctx context.Context, dir string, env []string, bin string, args ...string) error {
	if env == nil {
		env = []string{}
	}
	_, err := execTool(ctx, dir, env, bin, args...)
	return err
}

// runToolOutput runs bin and returns its stdout and stderr together,
// trimmed (for version banners, which some tools print on stderr).
func runToolOutput(ctx context.Context, bin string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", &toolError{Cmd: filepath.Base(bin) + " " + strings.Join(args, " "), Err: err, Stderr: strings.TrimSpace(out.String())}
	}
	return strings.TrimSpace(out.String()), nil
}

// execTool runs bin; env nil means the current environment.
func execTool(ctx context.Context, dir string, env []string, bin string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return nil, &toolError{Cmd: filepath.Base(bin) + " " + strings.Join(args, " "), Err: err, Stderr: msg}
	}
	return stdout.Bytes(), nil
}

// toolError is a failed host command.
type toolError struct {
	Cmd    string
	Err    error
	Stderr string
}

func (e *toolError) Error() string {
	if e.Stderr == "" {
		return e.Cmd + ": " + e.Err.Error()
	}
	return e.Cmd + ": " + e.Err.Error() + ": " + e.Stderr
}
func (e *toolError) Unwrap() error { return e.Err }

// lookTool finds a host tool in PATH or in the sbin directories, which a
// non-root PATH often lacks.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("guest: %s not found: install the Debian package %s", name, toolPackage(name))
}

// toolPackage names the Debian package that provides a host tool.
func toolPackage(name string) string {
	switch {
	case strings.HasPrefix(name, "mkfs.ext"), name == "mke2fs", name == "e2fsck", name == "dumpe2fs":
		return "e2fsprogs"
	case strings.HasPrefix(name, "mkfs.vfat"), strings.HasPrefix(name, "mkfs.fat"):
		return "dosfstools"
	case name == "mkfs.btrfs", name == "btrfs":
		return "btrfs-progs"
	case name == "apt-get", name == "apt-cache":
		return "apt"
	case name == "dpkg-deb":
		return "dpkg"
	case name == "xz":
		return "xz-utils"
	}
	return name
}

// unwrapTool shortens a toolError to the tool's stderr for messages that
// already name the command.
func unwrapTool(err error) error {
	var te *toolError
	if errors.As(err, &te) && te.Stderr != "" {
		return errors.New(te.Stderr)
	}
	return err
}
