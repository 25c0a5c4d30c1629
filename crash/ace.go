package crash

import (
	"fmt"
	"strings"
)

// ACE-style bounded workloads (CrashMonkey's ACE, Mohan et al., OSDI '18):
// every sequence of N core ops over a small file set, each op followed by a
// persistence op on what it touched. AceSetup makes the files the core ops
// need before the checkpoint; a workload is what runs under the write log.
//
// Our op set is ACE's without fallocate and mmap writes (the agent has
// neither yet): creat, mkdir, write (overwrite, append, unaligned), O_DIRECT
// write, link, unlink, rmdir, rename (file, over a file, directory),
// setxattr, removexattr, truncate (shrink, grow); persistence: fsync of the
// file, fsync of its parent directory (syncfs for the lane root), fdatasync,
// sync.

// AceSetup is the state every ACE workload starts from: directories A and
// B (empty), files foo and A/foo with 8 KiB each, an xattr on foo.
var AceSetup = []string{
	"mkdir A 0755", "mkdir B 0755",
	"create foo 0644", "write foo 0 8192 0x11",
	"create A/foo 0644", "write A/foo 0 8192 0x22",
	"setxattr foo user.ace one",
}

// aceCore is one core op and the paths its persistence ops act on.
type aceCore struct {
	op      string
	file    string // the file (or directory) the op changed
	parent  string // its parent directory ("" the lane root)
	regular bool   // file is a regular file (fdatasync applies)
}

// aceCores are the core ops over AceSetup's files.
var aceCores = []aceCore{
	{"create bar 0644", "bar", "", true},
	{"create A/bar 0644", "A/bar", "A", true},
	{"mkdir A/C 0755", "A/C", "A", false},
	{"write foo 0 4096 0x55", "foo", "", true},
	{"write foo 8192 4096 0x55", "foo", "", true},
	{"write A/foo 1000 3000 0x55", "A/foo", "A", true},
	{"write foo 0 4096 0x66 direct", "foo", "", true},
	{"link foo bar", "bar", "", true},
	{"link foo A/bar", "A/bar", "A", true},
	{"unlink foo", "", "", false},
	{"unlink A/foo", "", "A", false},
	{"rmdir B", "", "", false},
	{"rename foo bar", "bar", "", true},
	{"rename foo A/bar", "A/bar", "A", true},
	{"rename A/foo foo", "foo", "", true},
	{"rename B A/B", "A/B", "A", false},
	{"setxattr foo user.new two", "foo", "", true},
	{"removexattr foo user.ace", "foo", "", true},
	{"truncate foo 2000", "foo", "", true},
	{"truncate A/foo 20000", "A/foo", "A", true},
}

// persistence is the persistence ops after c: fsync of what it changed,
// of its parent directory (syncfs of the lane when that is the root,
// which the agent cannot open by a path), fdatasync of a regular file,
// sync.
func (c aceCore) persistence() []string {
	var out []string
	if c.file != "" {
		out = append(out, "fsync "+c.file)
	}
	if c.parent == "" {
		out = append(out, "fsync") // the lane root cannot be named by a path: syncfs
	} else {
		out = append(out, "fsync "+c.parent)
	}
	if c.regular {
		out = append(out, "fdatasync "+c.file)
	}
	return append(out, "sync")
}

// aceSteps are every (core op, persistence op) pair, in order.
func aceSteps() [][2]string {
	var steps [][2]string
	for _, c := range aceCores {
		for _, p := range c.persistence() {
			steps = append(steps, [2]string{c.op, p})
		}
	}
	return steps
}

// MaxAceWorkloads bounds a workload list (seq2 has thousands).
const MaxAceWorkloads = 100_000

// AceWorkloads returns the workloads of "ace:seq1" or "ace:seq2": every
// sequence of 1 or 2 (core op, persistence op) steps, in order, at most
// max (0: all); truncated reports that max cut the list.
func AceWorkloads(name string, max int) (workloads [][]string, truncated bool, err error) {
	var n int
	switch name {
	case "ace:seq1":
		n = 1
	case "ace:seq2":
		n = 2
	default:
		return nil, false, fmt.Errorf("workload %q: want ace:seq1 or ace:seq2", name)
	}
	if max < 0 || max > MaxAceWorkloads {
		return nil, false, fmt.Errorf("max workloads %d: want 0 (all) to %d", max, MaxAceWorkloads)
	}
	steps := aceSteps()
	idx := make([]int, n)
	for {
		if max > 0 && len(workloads) == max {
			return workloads, true, nil
		}
		var w []string
		for _, i := range idx {
			w = append(w, steps[i][0], steps[i][1])
		}
		workloads = append(workloads, w)
		k := n - 1
		for k >= 0 && idx[k] == len(steps)-1 {
			idx[k] = 0
			k--
		}
		if k < 0 {
			return workloads, false, nil
		}
		idx[k]++
	}
}

// Describe is a workload on one line.
func Describe(w []string) string { return strings.Join(w, "; ") }
