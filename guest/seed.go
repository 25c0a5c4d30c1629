package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/zeebo/blake3"
)

// MaxSeed is the largest seed= a lane spec accepts.
const MaxSeed = 3

// seedFormat versions the seed trees and the way they are written into a
// base image; it is part of a seeded image's cache key.
const seedFormat = "themis-seed/v1"

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

// seedDigest identifies a seed tree in a cache key: its format and every
// entry's path, kind, mode and content.
func seedDigest(tree []SeedEntry) string {
	h := blake3.New()
	put := func(b []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:]) // blake3's Write never fails
		h.Write(b)
	}
	put([]byte(seedFormat))
	for _, e := range tree {
		put([]byte(e.Path))
		put([]byte(fmt.Sprintf("dir=%v mode=%o", e.Dir, e.Mode)))
		put(e.Data)
	}
	return fmt.Sprintf("seed=%x", h.Sum(nil))
}

// seedExt writes tree into the ext2/3/4 image img with debugfs -w (mkfs is
// done), then reads every directory back and checks the result. Not
// `mke2fs -d`: it copies each inode's ctime (which nobody can set), owner
// and extended attributes (SELinux labels, ...) from the host's files, and
// the image would depend on the host. debugfs makes each inode with the
// pinned fake time as its times and root as its owner; the mode is set
// explicitly. bin is debugfs; dir is scratch space for the files' content.
func seedExt(ctx context.Context, bin, img, dir string, tree []SeedEntry) error {
	var script strings.Builder
	for i, e := range tree {
		parent, name := path.Split(e.Path)
		fmt.Fprintf(&script, "cd /%s\n", parent)
		if e.Dir {
			fmt.Fprintf(&script, "mkdir %s\n", name)
			fmt.Fprintf(&script, "sif %s mode 0%o\n", name, 0o040000|e.Mode)
		} else {
			// Relative to dir, where debugfs runs: no cache path (which
			// may hold spaces) in the script.
			src := strconv.Itoa(i)
			if err := os.WriteFile(filepath.Join(dir, src), e.Data, 0o600); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
			fmt.Fprintf(&script, "write %s %s\n", src, name)
			fmt.Fprintf(&script, "sif %s mode 0%o\n", name, 0o100000|e.Mode)
		}
	}
	cmds := filepath.Join(dir, "seed.debugfs")
	if err := os.WriteFile(cmds, []byte(script.String()), 0o600); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	env := []string{"E2FSPROGS_FAKE_TIME=" + strconv.Itoa(BaseFakeTime)}
	// debugfs goes on after a failed command and exits 0: the read-back
	// below is what says whether the tree is there.
	out, err := runDebugfs(ctx, dir, bin, env, "-w", "-f", cmds, img)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := checkSeeded(ctx, bin, img, tree); err != nil {
		return fmt.Errorf("seed: %w (debugfs said: %s)", err, strings.TrimSpace(out))
	}
	return nil
}

// runDebugfs runs debugfs in dir ("": here) with the environment cleaned
// like mkfs's and env added, returning stdout and stderr together.
func runDebugfs(ctx context.Context, dir, bin string, env []string, args ...string) (string, error) {
	var clean []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "E2FSPROGS_") || strings.HasPrefix(k, "DEBUGFS_") {
			continue
		}
		clean = append(clean, kv)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(clean, env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", &toolError{Cmd: filepath.Base(bin) + " " + strings.Join(args, " "), Err: err, Stderr: strings.TrimSpace(out.String())}
	}
	return out.String(), nil
}

// checkSeeded lists every directory of tree in img (debugfs ls -p) and
// checks that each entry is there with its kind, mode, owner root and size.
func checkSeeded(ctx context.Context, bin, img string, tree []SeedEntry) error {
	dirs := []string{"/"}
	for _, e := range tree {
		if e.Dir {
			dirs = append(dirs, "/"+e.Path)
		}
	}
	type got struct {
		mode     uint64
		uid, gid string
		size     string
	}
	listed := make(map[string]got)
	for _, d := range dirs {
		out, err := runDebugfs(ctx, "", bin, nil, "-R", "ls -p "+d, img)
		if err != nil {
			return err
		}
		// Lines are /ino/mode/uid/gid/name/size/ (size empty for dirs).
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			f := strings.Split(sc.Text(), "/")
			if len(f) != 8 || f[0] != "" || f[5] == "." || f[5] == ".." {
				continue
			}
			mode, err := strconv.ParseUint(f[2], 8, 32)
			if err != nil {
				continue
			}
			listed[path.Join(strings.TrimPrefix(d, "/"), f[5])] = got{mode: mode, uid: f[3], gid: f[4], size: f[6]}
		}
	}
	for _, e := range tree {
		g, ok := listed[e.Path]
		want := got{mode: 0o100000 | uint64(e.Mode), uid: "0", gid: "0", size: strconv.Itoa(len(e.Data))}
		if e.Dir {
			want.mode, want.size = 0o040000|uint64(e.Mode), ""
		}
		switch {
		case !ok:
			return fmt.Errorf("%s missing from the image", e.Path)
		case g != want:
			return fmt.Errorf("%s: mode %o uid %s gid %s size %q in the image, want mode %o uid 0 gid 0 size %q", e.Path, g.mode, g.uid, g.gid, g.size, want.mode, want.size)
		}
	}
	return nil
}
