package nested

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// libDirs are where a Debian amd64 host keeps shared libraries, in the
// order the dynamic loader searches them.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// maxDepLevels bounds the shared-library walk (a loop in DT_NEEDED would
// otherwise be caught only by the seen set).
const maxDepLevels = 16

// Stage is a job's root directory under construction.
type Stage struct {
	Root string
	libs map[string]bool
}

// NewStage makes an empty job root at dir (which must not exist yet or be empty).
func NewStage(dir string) (*Stage, error) {
	for _, d := range []string{"", "out", "tmp", "dev", "proc", "sys", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("nested: stage: %w", err)
		}
	}
	return &Stage{Root: dir, libs: map[string]bool{}}, nil
}

// path maps an absolute path inside the job to the staging tree.
func (s *Stage) path(dst string) (string, error) {
	if !filepath.IsAbs(dst) || strings.Contains(dst, "..") {
		return "", fmt.Errorf("nested: stage: %q: want an absolute path without ..", dst)
	}
	return filepath.Join(s.Root, dst), nil
}

// File copies the host file src (symlinks followed) to dst in the job.
func (s *Stage) File(dst, src string, perm os.FileMode) error {
	p, err := s.path(dst)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("nested: stage: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("nested: stage %s: %w", dst, err)
	}
	defer in.Close()
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("nested: stage %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("nested: stage %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("nested: stage %s: %w", dst, err)
	}
	return nil
}

// Data writes b to dst in the job.
func (s *Stage) Data(dst string, b []byte, perm os.FileMode) error {
	p, err := s.path(dst)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("nested: stage: %w", err)
	}
	if err := os.WriteFile(p, b, perm); err != nil {
		return fmt.Errorf("nested: stage %s: %w", dst, err)
	}
	return nil
}

// Tool copies a host program found in PATH to the same path in the job,
// under the name it was asked by (mkfs.ext2 and mkfs.ext4 are one binary
// that reads its name), with the dynamic loader and every shared library
// it needs.
func (s *Stage) Tool(name string) error {
	p, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("nested: tool %s: %w", name, err)
	}
	if err := s.File(p, p, 0o755); err != nil {
		return err
	}
	return s.needs(p, 0)
}

// Library copies the host library p (an absolute path: one loaded by
// LD_PRELOAD, which no program names) to the same path in the job, with
// the libraries it needs.
func (s *Stage) Library(p string) error {
	if s.libs[p] {
		return nil
	}
	if err := s.File(p, p, 0o644); err != nil {
		return err
	}
	s.libs[p] = true
	return s.needs(p, 0)
}

// needs copies the ELF interpreter and DT_NEEDED libraries of bin, recursively.
func (s *Stage) needs(bin string, level int) error {
	if level > maxDepLevels {
		return fmt.Errorf("nested: %s: shared libraries nest deeper than %d", bin, maxDepLevels)
	}
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("nested: %s: %w", bin, err)
	}
	defer f.Close()
	var want []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err != nil {
				return fmt.Errorf("nested: %s: interpreter: %w", bin, err)
			}
			want = append(want, strings.TrimRight(string(b), "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("nested: %s: libraries: %w", bin, err)
	}
	for _, l := range libs {
		p, err := findLib(l)
		if err != nil {
			return fmt.Errorf("nested: %s: %w", bin, err)
		}
		want = append(want, p)
	}
	for _, p := range want {
		if s.libs[p] {
			continue
		}
		s.libs[p] = true
		if err := s.File(p, p, 0o755); err != nil {
			return err
		}
		if err := s.needs(p, level+1); err != nil {
			return err
		}
	}
	return nil
}

func findLib(name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("shared library %s not found in %s", name, strings.Join(libDirs, ", "))
}
