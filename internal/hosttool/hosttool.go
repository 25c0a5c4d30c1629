package hosttool

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

// Run runs the host tool name in dir and returns its stdout; a failure
// carries the tool's stderr.
func Run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	bin, err := Look(name)
	if err != nil {
		return nil, err
	}
	return run(ctx, dir, nil, bin, args...)
}

// RunEnv runs bin in dir ("": here) with exactly the environment env; output
// is dropped unless it fails.
func RunEnv(ctx context.Context, dir string, env []string, bin string, args ...string) error {
	if env == nil {
		env = []string{}
	}
	_, err := run(ctx, dir, env, bin, args...)
	return err
}

// Output runs bin in dir ("": here) with the environment env (nil: the
// current one) and returns its stdout and stderr together (for version
// banners, which some tools print on stderr, and for debugfs, which reports
// on both).
func Output(ctx context.Context, dir string, env []string, bin string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", &Error{Cmd: command(bin, args), Err: err, Stderr: strings.TrimSpace(out.String())}
	}
	return out.String(), nil
}

// run runs bin; env nil means the current environment.
func run(ctx context.Context, dir string, env []string, bin string, args ...string) ([]byte, error) {
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
		return nil, &Error{Cmd: command(bin, args), Err: err, Stderr: msg}
	}
	return stdout.Bytes(), nil
}

func command(bin string, args []string) string {
	return filepath.Base(bin) + " " + strings.Join(args, " ")
}

// Error is a failed host command.
type Error struct {
	Cmd    string // the tool's base name and its arguments
	Err    error
	Stderr string // trimmed
}

func (e *Error) Error() string {
	if e.Stderr == "" {
		return e.Cmd + ": " + e.Err.Error()
	}
	return e.Cmd + ": " + e.Err.Error() + ": " + e.Stderr
}

func (e *Error) Unwrap() error { return e.Err }

// Look finds a host tool in PATH or in the sbin directories, which a
// non-root PATH often lacks.
func Look(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: install the Debian package %s", name, Package(name))
}

// Package names the Debian package that provides a host tool.
func Package(name string) string {
	switch {
	case strings.HasPrefix(name, "mkfs.ext"), name == "mke2fs", name == "e2fsck", name == "dumpe2fs", name == "debugfs":
		return "e2fsprogs"
	case strings.HasPrefix(name, "mkfs.vfat"), strings.HasPrefix(name, "mkfs.fat"):
		return "dosfstools"
	case name == "mkfs.btrfs", name == "btrfs":
		return "btrfs-progs"
	case name == "mkfs.xfs", name == "xfs_repair", name == "xfs_db":
		return "xfsprogs"
	case name == "mkfs.exfat", name == "fsck.exfat", name == "tune.exfat":
		return "exfatprogs"
	case name == "mkfs.udf", name == "mkudffs", name == "udfinfo":
		return "udftools"
	case name == "mkfs.f2fs", name == "fsck.f2fs":
		return "f2fs-tools"
	case name == "mkfs.nilfs2", name == "nilfs-tune":
		return "nilfs-tools"
	case name == "mkfs.minix", name == "fsck.minix":
		return "util-linux"
	case name == "apt-get", name == "apt-cache":
		return "apt"
	case name == "dpkg-deb":
		return "dpkg"
	case name == "xz":
		return "xz-utils"
	}
	return name
}

// Unwrap shortens an *Error to the tool's stderr, for messages that
// already name the command.
func Unwrap(err error) error {
	var te *Error
	if errors.As(err, &te) && te.Stderr != "" {
		return errors.New(te.Stderr)
	}
	return err
}
