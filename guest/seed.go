package guest

import (
	"bytes"
	"fmt"
	"path"
	"strconv"
)

// MaxSeed is the largest seed= a lane spec accepts.
const MaxSeed = 3

// SeedEntry is one node of a seed tree.
type SeedEntry struct {
	// Path is relative to the filesystem root, slash-separated.
	Path string
	// Dir says the entry is a directory; otherwise it is a regular file.
	Dir bool
	// Mode holds the permission bits (0644 for files, 0755 for dirs).
	Mode uint32
	// Data is a regular file's content.
	Data []byte
}

// SeedTree returns the tree a lane spec's seed=n puts into a base image
// (an overlay lane's: into its lower layer), parents before children; nil
// for n <= 0. It uses the names of explore's default path pool (3 files
// f-00..f-02 and 2 dirs d-00, d-01 per level, depth 2), so that the ops
// explore draws name it:
//
//   - min(n+1, 3) files f-00.. at the root;
//   - d-00 holding n files d-00/f-00.. and n-1 empty dirs d-00/d-00..;
//   - d-01, empty.
//
// seed=1 is f-00, f-01, d-00/f-00 and the empty d-01. Files are 0644,
// directories 0755, all owned by root; the file at pool index i holds
// (i+1)*1000 bytes, its path and a newline repeated. Everything is fixed:
// the same n gives the same tree.
func SeedTree(n int) []SeedEntry {
	if n <= 0 {
		return nil
	}
	n = min(n, MaxSeed)
	file := func(dir string, i int) SeedEntry {
		p := path.Join(dir, fmt.Sprintf("f-%02d", i))
		line := []byte(p + "\n")
		size := (i + 1) * 1000
		data := bytes.Repeat(line, size/len(line)+1)[:size]
		return SeedEntry{Path: p, Mode: 0o644, Data: data}
	}
	dir := func(parent string, i int) SeedEntry {
		return SeedEntry{Path: path.Join(parent, fmt.Sprintf("d-%02d", i)), Dir: true, Mode: 0o755}
	}
	var out []SeedEntry
	for i := range min(n+1, 3) {
		out = append(out, file("", i))
	}
	out = append(out, dir("", 0), dir("", 1))
	for i := range n {
		out = append(out, file("d-00", i))
	}
	for i := range n - 1 {
		out = append(out, dir("d-00", i))
	}
	return out
}

// Seed returns the lane's seed= (0: none).
func (l LaneSpec) Seed() int {
	n, _ := strconv.Atoi(l.Options["seed"]) // ParseLaneSpec stored a number, or nothing
	return n
}
