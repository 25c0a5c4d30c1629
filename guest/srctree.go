package guest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/zeebo/blake3"
)

// Bounds on a module source directory (a developer's fs/udf is a few
// hundred kB; fs/xfs 5 MB).
const (
	maxSourceFiles = 20000
	maxSourceBytes = 512 << 20
)

// copyTree copies a directory of regular files and directories; anything
// else (a symlink, a device) is an error.
func copyTree(src, dst string) error {
	_, err := walkSource(src, dst, func(string, fs.DirEntry) bool { return false })
	return err
}

// copyModuleSource hashes a module source directory (relative paths,
// modes and bytes, in path order) and copies it to dst unless dst is "",
// leaving out what a build leaves there (objects, modules, kbuild's .cmd
// files) and version-control directories.
func copyModuleSource(src, dst string) (string, error) {
	st, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("guest: module source: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("guest: module source %s is not a directory", src)
	}
	if _, err := os.Stat(filepath.Join(src, "Makefile")); err != nil {
		return "", fmt.Errorf("guest: module source %s has no Makefile (want a kbuild directory such as fs/udf)", src)
	}
	return walkSource(src, dst, isBuildProduct)
}

// isBuildProduct says whether a directory entry is a build's output or a
// version-control directory rather than source.
func isBuildProduct(name string, d fs.DirEntry) bool {
	if d.IsDir() {
		return name == ".git" || strings.HasPrefix(name, ".tmp")
	}
	for _, suf := range []string{".o", ".ko", ".mod", ".mod.c", ".cmd", ".a", ".order", ".symvers", ".stripped", ".dwo"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// walkSource walks src in path order, skipping what skip says, hashing
// every kept entry and copying it under dst ("" copies nothing).
func walkSource(src, dst string, skip func(string, fs.DirEntry) bool) (string, error) {
	h := blake3.New()
	var files int
	var total int64
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel != "." && skip(d.Name(), d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if files++; files > maxSourceFiles {
			return fmt.Errorf("more than %d files", maxSourceFiles)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(rel)))
		h.Write(n[:])
		h.Write([]byte(rel))
		switch {
		case d.IsDir():
			h.Write([]byte{'d'})
			if dst != "" {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			return nil
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file or directory", rel)
		}
		if total += info.Size(); total > maxSourceBytes {
			return fmt.Errorf("more than %d bytes", maxSourceBytes)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write([]byte{'f', byte(info.Mode().Perm() >> 6)})
		h.Write(n[:])
		h.Write(b)
		if dst != "" {
			return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm()|0o200)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("guest: source %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
