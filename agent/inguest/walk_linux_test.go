package inguest

import (
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func walkReq(p string, recursive bool, maxEntries, maxDepth uint32) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Walk{Walk: &agentv1.Walk{
		Lane: lane, Path: p, Recursive: recursive, MaxEntries: maxEntries, MaxDepth: maxDepth}}}
}

func TestWalk(t *testing.T) {
	t.Parallel()
	// setup's d/, d/f, e/, s -> d/f, plus a/b/c/g (three levels) and sd -> d.
	build := func(t *testing.T, dir string) {
		t.Helper()
		setup(t, dir)
		if err := os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "a/b/c/g"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("d", filepath.Join(dir, "sd")); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		req       *agentv1.Request
		wantErrno syscall.Errno
		want      *agentv1.WalkResult // when wantErrno is 0
	}{
		{"ls root", walkReq("", false, 0, 0), 0, &agentv1.WalkResult{Entries: 5, Directories: 1}},
		{"ls dir", walkReq("d", false, 0, 0), 0, &agentv1.WalkResult{Entries: 1, Directories: 1}},
		{"ls empty dir", walkReq("e", false, 0, 0), 0, &agentv1.WalkResult{Directories: 1}},
		{"ls file", walkReq("d/f", false, 0, 0), 0, &agentv1.WalkResult{}},
		{"ls symlink to dir is not followed", walkReq("sd", false, 0, 0), 0, &agentv1.WalkResult{}},
		{"ls ignores max_depth", walkReq("a", false, 0, 1), 0, &agentv1.WalkResult{Entries: 1, Directories: 1}},
		{"find root", walkReq("", true, 0, 0), 0, &agentv1.WalkResult{Entries: 9, Directories: 6, Depth: 3}},
		{"find subtree", walkReq("a", true, 0, 0), 0, &agentv1.WalkResult{Entries: 3, Directories: 3, Depth: 2}},
		{"find file", walkReq("a/b/c/g", true, 0, 0), 0, &agentv1.WalkResult{}},
		{"find exactly max_entries", walkReq("", true, 9, 0), 0, &agentv1.WalkResult{Entries: 9, Directories: 6, Depth: 3}},
		{"find exactly max_depth", walkReq("", true, 0, 3), 0, &agentv1.WalkResult{Entries: 9, Directories: 6, Depth: 3}},
		{"find over max_entries", walkReq("", true, 8, 0), unix.E2BIG, nil},
		{"ls over max_entries", walkReq("", false, 4, 0), unix.E2BIG, nil},
		{"find over max_depth", walkReq("", true, 0, 2), unix.ELOOP, nil},
		{"max_entries above cap", walkReq("", true, maxWalkEntries+1, 0), unix.EINVAL, nil},
		{"max_depth above cap", walkReq("", true, 0, maxWalkDepth+1), unix.EINVAL, nil},
		{"missing", walkReq("nope", true, 0, 0), unix.ENOENT, nil},
		{"under a file", walkReq("d/f/x", false, 0, 0), unix.ENOTDIR, nil},
		{"dotdot", walkReq("../x", true, 0, 0), unix.EINVAL, nil},
		{"absolute", walkReq("/etc", true, 0, 0), unix.EINVAL, nil},
		{"unclean", walkReq("a/../d", true, 0, 0), unix.EINVAL, nil},
		{"no lane", &agentv1.Request{Op: &agentv1.Request_Walk{Walk: &agentv1.Walk{Lane: "other"}}}, unix.ENOENT, nil},
		{"empty lane", &agentv1.Request{Op: &agentv1.Request_Walk{Walk: &agentv1.Walk{}}}, unix.EINVAL, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, dir := newServer(t)
			build(t, dir)
			resp := s.Handle(tt.req)
			if got := errnoOf(resp); got != tt.wantErrno {
				t.Fatalf("errno = %v (%q), want %v", got, resp.GetError(), tt.wantErrno)
			}
			if tt.wantErrno != 0 {
				if resp.GetError() == "" {
					t.Errorf("errno %v without error text", tt.wantErrno)
				}
				return
			}
			got := resp.GetWalk()
			if got.GetEntries() != tt.want.GetEntries() || got.GetDirectories() != tt.want.GetDirectories() || got.GetDepth() != tt.want.GetDepth() {
				t.Errorf("walk = %v, want %v", got, tt.want)
			}
			if resp.GetRet() != int64(got.GetEntries()) {
				t.Errorf("ret = %d, want the entries %d", resp.GetRet(), got.GetEntries())
			}
		})
	}
}

// TestWalkAgainstWalkDir compares find and ls on random trees with a naive
// model: filepath.WalkDir (which never follows symlinks) and os.ReadDir.
func TestWalkAgainstWalkDir(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		s, dir := newServer(t)
		rng := rand.New(rand.NewPCG(seed, 1))
		dirs := []string{dir}
		for i := range 1 + rng.IntN(60) {
			parent := dirs[rng.IntN(len(dirs))]
			p := filepath.Join(parent, "n"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			var err error
			switch rng.IntN(3) {
			case 0:
				err = os.Mkdir(p, 0o755)
				dirs = append(dirs, p)
			case 1:
				err = os.WriteFile(p, []byte("data"), 0o644)
			default:
				err = os.Symlink(dirs[rng.IntN(len(dirs))], p) // a symlink to a directory
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		start := dirs[rng.IntN(len(dirs))]
		rel, err := filepath.Rel(dir, start)
		if err != nil {
			t.Fatal(err)
		}
		if rel == "." {
			rel = ""
		}
		var want agentv1.WalkResult
		err = filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != start {
				want.Entries++
			}
			if d.IsDir() {
				want.Directories++
				if p != start {
					r, err := filepath.Rel(start, p)
					if err != nil {
						return err
					}
					want.Depth = max(want.Depth, uint32(strings.Count(r, "/")+1))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := must(t, s, walkReq(rel, true, 0, 0)).GetWalk()
		if got.GetEntries() != want.Entries || got.GetDirectories() != want.Directories || got.GetDepth() != want.Depth {
			t.Errorf("seed %d: find %q = %v, want %v", seed, rel, got, &want)
		}
		ents, err := os.ReadDir(start)
		if err != nil {
			t.Fatal(err)
		}
		if got := must(t, s, walkReq(rel, false, 0, 0)).GetWalk(); got.GetEntries() != uint64(len(ents)) || got.GetDirectories() != 1 {
			t.Errorf("seed %d: ls %q = %v, want %d entries in 1 directory", seed, rel, got, len(ents))
		}
	}
}
