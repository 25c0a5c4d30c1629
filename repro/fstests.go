package repro

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"text/template"
	"unicode"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/explore"
)

// Finding kinds an fstests test expresses besides the differential ones:
// a lane's self-references (its tree across an umount and a mount, its
// checker) and a crash state (runs/exploration, session).
const (
	KindRemount = api.KindRemount
	KindFsck    = api.KindFsck
	KindCrash   = "crash"
	// KindSeekAnswer: a lane's lseek SEEK_DATA or SEEK_HOLE answer that
	// lseek(2) rules out (every run checks it).
	KindSeekAnswer = api.KindSeekAnswer
)

// FSTests is what an fstests test of a finding needs.
type FSTests struct {
	// Name is the test's name in the suite: DIR/NNN (DIR a directory of
	// tests/, NNN three or more digits).
	Name    string
	Finding Finding
	// Lane is the lane the test runs as: $FSTYP must be its FS, the
	// scratch filesystem is made with Mkfs (baseimage.ShapeArgs) and
	// mounted with its MountOptions.
	Lane Lane
	Mkfs []string
	// Errno is the last op's expected errno (0: it succeeds): the
	// reference lane's, or the lane's own for a single-lane finding.
	Errno int
	// Reference says where the expected behaviour comes from, in words
	// ("lane vfat", "the model: ...").
	Reference string
	// Value is a state divergence's expected value of Finding.Field at
	// Finding.Path (the reference lane's, as explore.FieldDiff words it).
	Value string
	// Crash is a crash finding's crash point (nil for other kinds).
	Crash *FSTestsCrash
	// Version is Themis's.
	Version string
}

// FSTestsCrash is a crash finding's crash point as a test needs it.
type FSTestsCrash struct {
	// Setup ran before the trace, then a sync when SetupSync.
	Setup     []string
	SetupSync bool
	// Kept is how many write-log entries the state keeps, Writes and
	// Flushes the log's writes and completed flushes in it, LogFlushes
	// the flushes when the trace's last op returned.
	Kept, Writes, Flushes, LogFlushes int
	// Lost says the state lost what the last op's fsync made durable;
	// else the checker found it not clean.
	Lost bool
}

// fstestsName is a test's name: the directory and the number.
var fstestsName = regexp.MustCompile(`^([a-z0-9_]+)/([0-9]{3,})$`)

// statFormats are stat(1)'s formats of the fields a state divergence test
// prints as stat does (mode, missing and kind have their own lines).
var statFormats = map[string]string{"uid": "%u", "gid": "%g", "nlink": "%h", "size": "%s"}

//go:embed fstests.tmpl
var fstestsTemplate string

var fstestsTmpl = template.Must(template.New("fstests").Funcs(escapers).Parse(fstestsTemplate))

// fstStep is one op in the test: its label (the trace's step from 1, or
// setup-N), its command line (quoted by shStep) and whether the lanes
// were remounted, or walked (explore.WalkedBefore), before it.
type fstStep struct {
	Label, Cmd  string
	Fresh, Walk bool
}

// fstestsView is the template's data: every string from the finding or
// its lane is a text, printed only through an escaper; Cmd, Label, Num,
// Groups, Check, Field and StatFormat are Themis's own.
type fstestsView struct {
	Num, Groups, Check, LastStep, StatFormat string
	ID, Kind, Detail, Spec, FS, Version      text
	MountOptions, Expect, Path, PathArg      text
	Field                                    string
	Setup, Trace, Mkfs                       []text
	SetupSync, Flakey, Attrs, ReadContent    bool
	// TimeFormat is stat's format of the time a remount finding is
	// about (" %x", " %y", " %z"; "" none).
	TimeFormat        string
	Renameat          []string
	SetupSteps, Steps []fstStep
}

// FSTestsFiles writes finding t as an fstests test: the script NNN and
// its golden output NNN.out (the expected behaviour: the reference lane's
// or the model's, so that the test fails where the kernel shows the
// finding). It expresses errno and state divergences (a state's field
// where stat shows it), a remount or fsck self-reference, and a crash
// finding whose state dm-flakey makes (every write up to the trace's end
// kept, none after), and a seek-answer finding (xfs_io's seek walks the
// file's data and holes); it refuses the others saying why, a kernel finding
// among them (it crashes the machine the suite runs on: its repro.sh
// --in-vm is the way to run it).
func FSTestsFiles(t FSTests) (Files, error) {
	f := t.Finding
	m := fstestsName.FindStringSubmatch(t.Name)
	if m == nil {
		return nil, fmt.Errorf("repro: fstests test name %q: want DIR/NNN (a directory of tests/, three or more digits)", t.Name)
	}
	if len(f.Trace) == 0 {
		return nil, fmt.Errorf("repro: finding %q has no trace", f.ID)
	}
	v := fstestsView{Num: m[2], Groups: "auto quick", ID: text(f.ID), Kind: text(f.Kind), Detail: text(f.Detail), Spec: text(t.Lane.Spec),
		FS: text(t.Lane.FS), Version: text(orUnknown(t.Version)), MountOptions: text(t.Lane.MountOptions), Path: text(f.Path),
		PathArg: text(f.Path), Trace: texts(f.Trace), Mkfs: texts(t.Mkfs)}
	if f.Path == "" {
		v.PathArg = "."
	}
	check, golden, err := fstestsCheck(t, &v)
	if err != nil {
		return nil, err
	}
	v.Check = check
	if err := fstestsSteps(t, &v); err != nil {
		return nil, err
	}
	script, err := render(fstestsTmpl, "fstests", v)
	if err != nil {
		return nil, err
	}
	out := "QA output created by " + m[2] + "\n" + fmt.Sprintf("step %s: %s\n", v.LastStep, errnoText(t.Errno)) + golden
	return Files{m[2]: script, m[2] + ".out": []byte(out)}, nil
}

// fstestsCheck is how the test checks finding t after its ops (the
// template's Check) and its golden lines after the last op's; it sets
// the view's expectation, groups and helpers.
func fstestsCheck(t FSTests, v *fstestsView) (check, golden string, err error) {
	f := t.Finding
	v.Expect = text(fmt.Sprintf("%s (from %s)", expectation(t), t.Reference))
	switch f.Kind {
	case KindErrno:
		return "errno", "", nil
	case KindState:
		return fstestsState(t, v)
	case KindRemount:
		v.Groups += " metadata"
		v.TimeFormat = map[string]string{"atime": " %x", "mtime": " %y", "ctime": " %z"}[f.Field]
		// Reading a file moves its atime: not where the atime is the point.
		v.ReadContent = f.Field != "atime"
		return "remount", "the tree is the same after umount+mount\n", nil
	case KindFsck:
		return "fsck", "", nil
	case KindCrash:
		return fstestsCrash(t, v)
	case KindSeekAnswer:
		if f.Path == "" {
			return "", "", fmt.Errorf("repro: seek-answer finding %q names no file", f.ID)
		}
		return "seek", "lseek's data and hole answers lie within the file\n", nil
	case KindKernel:
		return "", "", fmt.Errorf("repro: finding %q is a kernel finding: not exported as fstests (its trace crashes the kernel of the machine the suite runs on; `themisctl findings export` writes a repro.sh that runs it inside a throwaway VM)", f.ID)
	}
	return "", "", fmt.Errorf("repro: finding %q is a %q: an fstests test expresses %s, %s, %s, %s, %s and %s findings", f.ID, f.Kind, KindErrno, KindState, KindRemount, KindFsck, KindCrash, KindSeekAnswer)
}

// expectation is the golden output's claim in words.
func expectation(t FSTests) string {
	last := fmt.Sprintf("the last op gives %s", errnoText(t.Errno))
	switch t.Finding.Kind {
	case KindState:
		return fmt.Sprintf("%s and leaves %s %s at the finding's path", last, t.Finding.Field, t.Value)
	case KindRemount:
		return last + " and an umount and a mount change nothing of the tree"
	case KindFsck:
		return last + " and the filesystem checks clean"
	case KindSeekAnswer:
		return last + " and lseek's SEEK_DATA and SEEK_HOLE answers on the file lie within it"
	case KindCrash:
		if t.Crash != nil && t.Crash.Lost {
			return last + " and its fsync makes the file's content durable across a power cut"
		}
		return last + " and a power cut after it leaves a filesystem that checks clean"
	}
	return last
}

// fstestsState is a state divergence's check: the field at the path,
// printed as the finding words it.
func fstestsState(t FSTests, v *fstestsView) (string, string, error) {
	f := t.Finding
	switch f.Field {
	case "missing", "kind", "mode":
	default:
		if v.StatFormat = statFormats[f.Field]; v.StatFormat == "" {
			return "", "", fmt.Errorf("repro: finding %q differs in %q: not exported as fstests (a test prints missing, kind, mode, uid, gid, nlink and size; content is known only as the agent's hash, times depend on the clock)", f.ID, f.Field)
		}
	}
	if t.Value == "" || strings.ContainsAny(t.Value, "\r\n") {
		return "", "", fmt.Errorf("repro: finding %q: no expected value of %s (one line) to compare with", f.ID, f.Field)
	}
	v.Field = f.Field
	return "state", f.Field + ": " + t.Value + "\n", nil
}

// fstestsCrash is a crash finding's check, where dm-flakey makes its
// state: every write the log holds when the trace's last op returned
// kept, none after (the flushes all completed). A state that keeps fewer
// (a crash before the end, a torn or reordered epoch) it cannot make, nor
// can dm-log-writes, whose log's entries are not Themis's: refused.
func fstestsCrash(t FSTests, v *fstestsView) (string, string, error) {
	f, c := t.Finding, t.Crash
	if c == nil {
		return "", "", fmt.Errorf("repro: crash finding %q has no crash point", f.ID)
	}
	if c.Kept != c.Writes || c.Flushes != c.LogFlushes {
		return "", "", fmt.Errorf("repro: crash finding %q: its state keeps %d of %d writes after %d of %d flushes; dm-flakey only makes the state with every write up to the trace's end (dm-log-writes replays its own log, whose entries are not Themis's): not exported as fstests", f.ID, c.Kept, c.Writes, c.Flushes, c.LogFlushes)
	}
	v.Flakey, v.Groups = true, v.Groups+" log"
	v.Setup, v.SetupSync = texts(c.Setup), c.SetupSync
	if !c.Lost {
		return "crash-fsck", "", nil
	}
	last := f.Trace[len(f.Trace)-1]
	path, ok := fsyncPath(last)
	if !ok {
		return "", "", fmt.Errorf("repro: crash finding %q lost what its last op %q made durable: the test reads back an fsync's file by path; an fdatasync's promises no name (not exported as fstests)", f.ID, last)
	}
	v.PathArg = text(path)
	return "durable", "the fsynced file is intact after the power cut\n", nil
}

// fsyncPath is the file an fsync op (not fdatasync, not of the lane) syncs.
func fsyncPath(op string) (string, bool) {
	w := strings.Fields(op)
	if len(w) == 2 && w[0] == "fsync" {
		return w[1], true
	}
	return "", false
}

// fstestsSteps renders the setup and the trace, and what they require.
func fstestsSteps(t FSTests, v *fstestsView) error {
	add := func(label, s string, fresh, walk bool, into *[]fstStep) error {
		o, err := shStep(s)
		if err != nil {
			return err
		}
		v.Attrs = v.Attrs || o.Attrs
		if o.Renameat != "" && !slices.Contains(v.Renameat, o.Renameat) {
			v.Renameat = append(v.Renameat, o.Renameat)
		}
		*into = append(*into, fstStep{Label: label, Cmd: o.Cmd, Fresh: fresh, Walk: walk})
		return nil
	}
	if t.Crash != nil {
		for i, s := range t.Crash.Setup {
			if err := add(fmt.Sprintf("setup-%d", i+1), s, false, explore.WalkedBefore(i), &v.SetupSteps); err != nil {
				return err
			}
		}
	}
	for i, s := range t.Finding.Trace {
		fresh, walk, err := freshBefore(t.Finding, i)
		if err != nil {
			return err
		}
		if err := add(fmt.Sprint(i+1), s, fresh, walk, &v.Steps); err != nil {
			return err
		}
	}
	v.LastStep = fmt.Sprint(len(t.Finding.Trace))
	return nil
}

// errnoText is errno as the test prints an op's result: ok, or strerror's
// text (glibc's: Go's with its first letter upper case).
func errnoText(errno int) string {
	if errno == 0 {
		return "ok"
	}
	r := []rune(syscall.Errno(errno).Error())
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
