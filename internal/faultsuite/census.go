package faultsuite

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Scope is what a Census counts: a daemon process and the scratch and temp
// dirs its machines use.
type Scope struct {
	// PID is the daemon's process (os.Getpid() for one in this process).
	PID int
	// Scratch is the machines' scratch dir ($THEMIS_SCRATCH_DIR): a
	// process whose command line names it is one of their QEMUs.
	Scratch string
	// Temp is the daemon's temp dir ($TMPDIR).
	Temp string
}

// Census is what a daemon holds on the host at one moment.
type Census struct {
	// QEMU are the pids of the processes whose command line names the
	// scratch dir, sorted.
	QEMU []int
	// Zombies are the daemon's children that exited and were not reaped.
	Zombies []int
	// Others are the daemon's other live descendants ("pid comm", sorted
	// by pid): a host checker or its sandbox, say.
	Others []string
	// FDs are the targets of the daemon's open fds (one per fd, sorted);
	// nil when the daemon is not running.
	FDs []string
	// Scratch and Temp are the names in the scratch and temp dirs, sorted.
	Scratch, Temp []string
}

// Take counts what s holds now. A daemon that is gone has no fds and no
// zombies.
func (s Scope) Take() (Census, error) {
	var c Census
	var err error
	if c.QEMU, c.Zombies, c.Others, err = s.processes(); err != nil {
		return c, err
	}
	if c.FDs, err = fdTargets(s.PID); err != nil {
		return c, err
	}
	if c.Scratch, err = names(s.Scratch); err != nil {
		return c, err
	}
	if c.Temp, err = names(s.Temp); err != nil {
		return c, err
	}
	return c, nil
}

// processes scans /proc for the QEMUs of s.Scratch, the daemon's zombies
// and its other descendants.
func (s Scope) processes() (qemus, zombies []int, others []string, err error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("census: %w", err)
	}
	self := os.Getpid()
	procs := map[int]proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == s.PID {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		p, ok := procStat(pid)
		if !ok {
			continue
		}
		switch {
		case s.Scratch != "" && bytes.Contains(cmdline, []byte(s.Scratch)):
			qemus = append(qemus, pid)
		case p.state == "Z":
		default:
			procs[pid] = p
		}
		if p.ppid == s.PID && p.state == "Z" {
			zombies = append(zombies, pid)
		}
	}
	for pid, p := range procs {
		if descends(procs, p, s.PID) {
			others = append(others, fmt.Sprintf("%d %s", pid, p.comm))
		}
	}
	slices.SortFunc(others, func(a, b string) int { return atoiPrefix(a) - atoiPrefix(b) })
	return qemus, zombies, others, nil
}

// proc is what the census reads of a process's /proc/<pid>/stat.
type proc struct {
	ppid  int
	state string
	comm  string
}

// descends says whether p is a descendant of pid, following parents in
// procs (at most 64 up: a loop of reused pids ends there).
func descends(procs map[int]proc, p proc, pid int) bool {
	for range 64 {
		if p.ppid == pid {
			return true
		}
		var ok bool
		if p, ok = procs[p.ppid]; !ok {
			return false
		}
	}
	return false
}

// atoiPrefix is the number an Others entry starts with.
func atoiPrefix(s string) int {
	n, _ := strconv.Atoi(strings.SplitN(s, " ", 2)[0]) // an entry is "pid comm"
	return n
}

// procStat reads a process's parent, state and command name from
// /proc/<pid>/stat.
func procStat(pid int) (proc, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return proc{}, false
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 2 {
		return proc{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	return proc{ppid: ppid, state: f[0], comm: string(b[i+1 : j])}, err == nil
}

// fdTargets lists where pid's fds point; a process that is gone has none.
func fdTargets(pid int) ([]string, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed meanwhile (the ReadDir's own fd, too)
		}
		if err != nil {
			return nil, fmt.Errorf("census: %w", err)
		}
		out = append(out, target)
	}
	slices.Sort(out)
	return out, nil
}

// names lists dir's entries; an empty dir name has none.
func names(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// Diff says how c differs from base, "" when it is back at base: the same
// QEMU processes and dir entries, no more fds, no zombies. Fewer fds are
// not a leak (a pool that closed an idle connection).
func (c Census) Diff(base Census) string {
	var out []string
	add := func(what string, extra, missing []string) {
		if len(extra) > 0 {
			out = append(out, fmt.Sprintf("%s: %d more than at baseline: %s", what, len(extra), strings.Join(extra, ", ")))
		}
		if len(missing) > 0 {
			out = append(out, fmt.Sprintf("%s: %d of the baseline gone: %s", what, len(missing), strings.Join(missing, ", ")))
		}
	}
	add("QEMU processes", setDiff(itoa(c.QEMU), itoa(base.QEMU)), setDiff(itoa(base.QEMU), itoa(c.QEMU)))
	add("other processes of the daemon", setDiff(c.Others, base.Others), nil)
	add("scratch entries", setDiff(c.Scratch, base.Scratch), setDiff(base.Scratch, c.Scratch))
	add("temp entries", setDiff(c.Temp, base.Temp), setDiff(base.Temp, c.Temp))
	if len(c.FDs) > len(base.FDs) {
		out = append(out, fmt.Sprintf("fds: %d, %d at baseline; new: %s", len(c.FDs), len(base.FDs), strings.Join(setDiff(c.FDs, base.FDs), ", ")))
	}
	if len(c.Zombies) > 0 {
		out = append(out, fmt.Sprintf("unreaped children: %v", c.Zombies))
	}
	return strings.Join(out, "; ")
}

// String is a one-line summary of c.
func (c Census) String() string {
	return fmt.Sprintf("%d QEMU, %d other processes, %d fds, %d zombies, %d scratch and %d temp entries",
		len(c.QEMU), len(c.Others), len(c.FDs), len(c.Zombies), len(c.Scratch), len(c.Temp))
}

// setDiff returns the elements of a not in b, counting repeats (a
// multiset difference), in a's order.
func setDiff(a, b []string) []string {
	left := make(map[string]int, len(b))
	for _, s := range b {
		left[s]++
	}
	var out []string
	for _, s := range a {
		if left[s] > 0 {
			left[s]--
			continue
		}
		out = append(out, s)
	}
	return out
}

func itoa(ns []int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = strconv.Itoa(n)
	}
	return out
}
