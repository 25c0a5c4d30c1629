package baseimage

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/hosttool"
	"github.com/zeebo/blake3"
)

// seedFormat versions the seed trees and the way they are written into a
// base image; it is part of a seeded image's cache key.
const seedFormat = "themis-seed/v1"

// seedDigest identifies a seed tree in a cache key: its format and every
// entry's path, kind, mode and content.
func seedDigest(tree []guest.SeedEntry) string {
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
func seedExt(ctx context.Context, bin, img, dir string, tree []guest.SeedEntry) error {
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
	env := []string{"E2FSPROGS_FAKE_TIME=" + strconv.Itoa(FakeTime)}
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
	return hosttool.Output(ctx, dir, append(clean, env...), bin, args...)
}

// checkSeeded lists every directory of tree in img (debugfs ls -p) and
// checks that each entry is there with its kind, mode, owner root and size.
func checkSeeded(ctx context.Context, bin, img string, tree []guest.SeedEntry) error {
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
