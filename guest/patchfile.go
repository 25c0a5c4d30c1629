package guest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Bounds on a patch given to Build (untrusted input).
const (
	maxPatchBytes = 16 << 20 // a whole fs/xfs rewrite is a few MB
	maxPatchFiles = 2000
	maxPatchPath  = 255
)

// patchFiles is what a patch's file headers name: the files (relative to
// the kernel source root, as `patch -p1` sees them) and the fs/<dir>
// directories holding them, both sorted and without duplicates.
type patchFiles struct {
	Files []string
	Dirs  []string // "fs/udf", ...
}

// parsePatch reads the file headers of a unified diff (`--- a/...`,
// `+++ b/...`, git's `diff --git`, `rename from/to`, `copy from/to` and
// `Index:` lines: every line GNU patch or git apply might take a file name
// from) and checks each name: relative, no `.` or `..` component, plain
// characters, and under fs/<dir>/ (a file directly in fs/ is part of the
// kernel image, which no module build can change). /dev/null (a new or
// deleted file) is allowed. A patch with no file header is an error.
func parsePatch(b []byte) (*patchFiles, error) {
	if len(b) > maxPatchBytes {
		return nil, fmt.Errorf("patch is %d bytes, more than %d", len(b), maxPatchBytes)
	}
	files := make(map[string]bool)
	var oldLeft, newLeft int // lines left in the current hunk
	for i, raw := range bytes.Split(b, []byte("\n")) {
		line := string(bytes.TrimSuffix(raw, []byte("\r")))
		if oldLeft > 0 || newLeft > 0 {
			if err := hunkLine(line, &oldLeft, &newLeft); err != nil {
				return nil, fmt.Errorf("patch line %d: %w", i+1, err)
			}
			continue
		}
		if strings.HasPrefix(line, "@@ ") {
			var err error
			if oldLeft, newLeft, err = hunkHeader(line); err != nil {
				return nil, fmt.Errorf("patch line %d: %w", i+1, err)
			}
			continue
		}
		name, strip, ok := headerName(line)
		if !ok {
			continue
		}
		for _, n := range name {
			if n == "/dev/null" {
				continue
			}
			p, err := patchPath(n, strip)
			if err != nil {
				return nil, fmt.Errorf("patch line %d: %w", i+1, err)
			}
			files[p] = true
			if len(files) > maxPatchFiles {
				return nil, fmt.Errorf("patch names more than %d files", maxPatchFiles)
			}
		}
	}
	if len(files) == 0 {
		return nil, errors.New("no file headers (---/+++ lines): not a unified diff")
	}
	pf := &patchFiles{}
	dirs := make(map[string]bool)
	for f := range files {
		pf.Files = append(pf.Files, f)
		parts := strings.SplitN(f, "/", 3)
		dirs[parts[0]+"/"+parts[1]] = true
	}
	for d := range dirs {
		pf.Dirs = append(pf.Dirs, d)
	}
	sort.Strings(pf.Files)
	sort.Strings(pf.Dirs)
	return pf, nil
}

// hunkHeader reads "@@ -l[,s] +l[,s] @@" and returns the old and new line
// counts of the hunk body that follows.
func hunkHeader(line string) (oldN, newN int, err error) {
	f := strings.Fields(line)
	if len(f) < 4 || f[3] != "@@" || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return 0, 0, fmt.Errorf("malformed hunk header %.80q", line)
	}
	count := func(r string) (int, error) {
		_, s, found := strings.Cut(r[1:], ",")
		if !found {
			return 1, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxPatchBytes {
			return 0, fmt.Errorf("malformed hunk header %.80q", line)
		}
		return n, nil
	}
	if oldN, err = count(f[1]); err != nil {
		return 0, 0, err
	}
	if newN, err = count(f[2]); err != nil {
		return 0, 0, err
	}
	return oldN, newN, nil
}

// hunkLine consumes one line of a hunk body, so that a removed line
// "-- x" or an added "++ x" is not taken for a file header.
func hunkLine(line string, oldLeft, newLeft *int) error {
	switch {
	case strings.HasPrefix(line, `\`): // "\ No newline at end of file"
		return nil
	case line == "" || line[0] == ' ': // context (an empty line: a blank context line)
		*oldLeft--
		*newLeft--
	case line[0] == '-':
		*oldLeft--
	case line[0] == '+':
		*newLeft--
	default:
		return fmt.Errorf("hunk body line %.80q starts with none of ' ', '-', '+'", line)
	}
	if *oldLeft < 0 || *newLeft < 0 {
		return errors.New("hunk body longer than its header says")
	}
	return nil
}

// headerName returns the file names a header line carries and whether
// they have a leading component (a/, b/) to strip; ok is false for a line
// that is no file header.
func headerName(line string) (names []string, strip, ok bool) {
	for _, h := range []struct {
		prefix string
		strip  bool
	}{
		{"--- ", true}, {"+++ ", true},
		{"rename from ", false}, {"rename to ", false},
		{"copy from ", false}, {"copy to ", false}, {"Index: ", false},
	} {
		if rest, found := strings.CutPrefix(line, h.prefix); found {
			name, _, _ := strings.Cut(rest, "\t") // a timestamp may follow a tab
			return []string{strings.TrimSpace(name)}, h.strip, true
		}
	}
	if rest, found := strings.CutPrefix(line, "diff --git "); found {
		f := strings.Fields(rest)
		if len(f) != 2 {
			return []string{rest}, true, true // quoted or spaced names: rejected by patchPath
		}
		return f, true, true
	}
	return nil, false, false
}

// patchPath checks one header name and returns it relative to the source
// root (its first component stripped when strip is set, as -p1 does).
func patchPath(name string, strip bool) (string, error) {
	if len(name) > maxPatchPath {
		return "", fmt.Errorf("file name longer than %d bytes", maxPatchPath)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._+,-", c)) {
			return "", fmt.Errorf("file name %q: character %q not allowed", name, c)
		}
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("file name %q is absolute", name)
	}
	parts := strings.Split(name, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return "", fmt.Errorf("file name %q: empty, . or .. component", name)
		}
	}
	if strip {
		if len(parts) < 2 {
			return "", fmt.Errorf("file name %q has no leading directory to strip (want a/fs/<dir>/...)", name)
		}
		parts = parts[1:]
	}
	rel := strings.Join(parts, "/")
	if parts[0] != "fs" || len(parts) < 3 {
		return "", fmt.Errorf("%s is not under fs/<dir>/: only a filesystem's own directory is built as a module", rel)
	}
	return rel, nil
}
