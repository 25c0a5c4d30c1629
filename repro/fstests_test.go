package repro

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// fstestsStub is a stand-in for an fstests checkout's common/ that runs a
// generated test unprivileged, on a plain directory as $SCRATCH_MNT: the
// helpers the tests call log what they were asked to $STUB_LOG/calls, the
// scratch mkfs its argv (NUL-separated) to $STUB_LOG/mkfs; nothing is
// mounted. _notrun and _fail print NOTRUN/FAIL lines.
const fstestsStub = `
_begin_fstest() {
	seq=$(basename $0); seqres=$RESULT_DIR/$seq; echo "QA output created by $seq"
	here=$(pwd); tmp=${TMPDIR:-/tmp}/$$; status=1
	trap '_cleanup; exit $status' EXIT
	. ./common/rc
}
_cleanup() { rm -rf $tmp.*; }
`

const fstestsStubRC = `
call() { echo "$*" >>$STUB_LOG/calls; }
_notrun() { echo "NOTRUN: $*"; status=0; exit; }
_fail() { echo "FAIL: $*"; exit 1; }
_require_scratch() { call require_scratch; }
_require_dm_target() { call require_dm_target "$@"; }
_require_attrs() { call require_attrs; }
_require_renameat2() { call require_renameat2 "$@"; }
_scratch_mkfs() { printf '%s\0' "$@" >$STUB_LOG/mkfs; }
_scratch_mount() { call scratch_mount; }
_scratch_unmount() { call scratch_unmount; }
_scratch_cycle_mount() { call scratch_cycle_mount; }
_check_scratch_fs() { call check_scratch_fs "$@"; }
_init_flakey() { call init_flakey; }
_cleanup_flakey() { call cleanup_flakey; }
_flakey_drop_and_remount() { call flakey_drop_and_remount; }
_require_xfs_io_command() { call require_xfs_io_command "$@"; }
_filter_scratch() { sed -e "s,$SCRATCH_MNT,SCRATCH_MNT,g"; }
`

// fstestsEnv is a stub checkout with test t's files in tests/DIR: its
// root, the scratch directory and the stubs' log.
type fstestsEnv struct{ root, scratch, log string }

func newFSTestsEnv(t *testing.T, name string, files Files) fstestsEnv {
	t.Helper()
	e := fstestsEnv{root: t.TempDir(), scratch: t.TempDir(), log: t.TempDir()}
	common := filepath.Join(e.root, "common")
	dir := filepath.Join(e.root, "tests", filepath.Dir(name))
	for _, d := range []string{common, dir, filepath.Join(e.root, "results")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stubs := map[string]string{"preamble": fstestsStub, "rc": fstestsStubRC, "filter": "", "dmflakey": "", "attr": "", "renameat2": ""}
	for n, body := range stubs {
		if err := os.WriteFile(filepath.Join(common, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// run runs test name as fstests' check does (from the checkout's root,
// umask 022) and returns its output.
// env's settings come after the stub's and win.
func (e fstestsEnv) run(t *testing.T, name, fstyp string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", `umask 022; exec bash "$0"`, filepath.Join("tests", name))
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "SCRATCH_MNT="+e.scratch, "RESULT_DIR="+filepath.Join(e.root, "results"), "STUB_LOG="+e.log,
		"FSTYP="+fstyp, "PERL_PROG=perl", "XFS_IO_PROG=xfs_io -i", "MOUNT_OPTIONS=", "LC_ALL=C")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}

func (e fstestsEnv) calls(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(e.log, "calls"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// needFSTestsTools skips t where the host lacks a tool the generated ops run.
func needFSTestsTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"perl", "xfs_io", "md5sum", "setfattr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the generated ops need %s: %v (Debian packages perl, xfsprogs, coreutils, attr)", tool, err)
		}
	}
}

func ext2Lane() Lane { return Lane{Spec: "ext2:inode_size=128", FS: "ext2", SizeMiB: 64} }

// TestFSTestsFiles renders each kind an fstests test expresses, runs the
// script against the stub checkout on a plain directory (the ops are real
// syscalls on the host's filesystem) and compares its output with the
// golden one where the expectation holds there, as check would, or checks
// that it differs where the host's filesystem behaves as the finding's
// buggy lane. The helpers the kind needs must be called.
func TestFSTestsFiles(t *testing.T) {
	needFSTestsTools(t)
	trace := []string{"mkdir d 0755", "create d/f 0640", "write d/f 0 5000 0x61", "truncate d/f 4096", "link d/f g", "symlink d/f s", "chmod g 0600", "rename g h", "fsync h"}
	sparse := []string{"create f 0644", "write f 0 4096 0x61", "write f 1048576 4096 0x62"}
	tests := []struct {
		name   string
		in     FSTests
		match  bool // the output is the golden one on the host
		script []string
		calls  []string
		golden string // the golden output after the QA line
		xfsIO  string // a stand-in xfs_io's output, stdout then ">&2" stderr ("": the host's xfs_io)
		out    string // in the output where it is not the golden one
	}{
		{name: "state-mode", in: FSTests{Finding: Finding{ID: "f-01", Kind: KindState, Path: "h", Field: "mode", Trace: trace}, Value: "0600", Reference: "lane vfat"},
			match: true, script: []string{". ./common/preamble", "_begin_fstest auto quick", "_require_scratch", "_scratch_mkfs -I 128 >>$seqres.full", "_scratch_mount", `[ "$FSTYP" = ext2 ]`},
			calls: []string{"require_scratch", "scratch_mount"}, golden: "step 9: ok\nmode: 0600\n"},
		{name: "state-size-differs", in: FSTests{Finding: Finding{ID: "f-02", Kind: KindState, Path: "d/f", Field: "size", Trace: trace}, Value: "5000", Reference: "lane vfat"},
			match: false, golden: "step 9: ok\nsize: 5000\n"},
		{name: "state-nlink", in: FSTests{Finding: Finding{ID: "f-03", Kind: KindState, Path: "d/f", Field: "nlink", Trace: trace}, Value: "2", Reference: "lane vfat"},
			match: true, golden: "step 9: ok\nnlink: 2\n"},
		{name: "state-missing", in: FSTests{Finding: Finding{ID: "f-04", Kind: KindState, Path: "g", Field: "missing", Trace: trace}, Value: "absent", Reference: "lane vfat"},
			match: true, golden: "step 9: ok\nmissing: absent\n"},
		{name: "state-kind", in: FSTests{Finding: Finding{ID: "f-05", Kind: KindState, Path: "s", Field: "kind", Trace: trace}, Value: "KIND_SYMLINK", Reference: "lane vfat"},
			match: true, golden: "step 9: ok\nkind: KIND_SYMLINK\n"},
		{name: "errno", in: FSTests{Finding: Finding{ID: "f-06", Kind: KindErrno, Trace: []string{"mkdir d 0755", "rmdir d", "rmdir d"}}, Errno: int(syscall.ENOENT), Reference: "lane xfs"},
			match: true, golden: "step 3: No such file or directory\n"},
		{name: "errno-differs", in: FSTests{Finding: Finding{ID: "f-07", Kind: KindErrno, Trace: []string{"mkdir d 0755", "create d/x 0644", "rmdir d"}}, Errno: 0, Reference: "lane xfs"},
			match: false, golden: "step 3: ok\n"},
		{name: "remount", in: FSTests{Finding: Finding{ID: "f-08", Kind: KindRemount, Path: "h", Field: "size", Trace: trace, Revert: "remount"}, Reference: "the model"},
			match: true, script: []string{"_scratch_cycle_mount\nthemis_op 2 ", "iflag=noatime", "themis_state >$tmp.before\n_scratch_cycle_mount\nthemis_state >$tmp.after"},
			calls: []string{"scratch_cycle_mount"}, golden: "step 9: ok\nthe tree is the same after umount+mount\n"},
		{name: "remount-same-mount", in: FSTests{Finding: Finding{ID: "f-0b", Kind: KindRemount, Path: "h", Field: "size", Trace: sameMount(trace, 6), Revert: "remount"}, Reference: "the model"},
			match: true, script: []string{"themis_op 6 ln -s -T -- d/f ./s\nthemis_walk\nthemis_op 7 chmod", "themis_op 7 chmod 00600 -- ./g\nthemis_walk\n_scratch_cycle_mount\nthemis_op 8 "},
			calls: []string{"scratch_cycle_mount"}, golden: "step 9: ok\nthe tree is the same after umount+mount\n"},
		{name: "fsck", in: FSTests{Finding: Finding{ID: "f-09", Kind: KindFsck, Trace: trace}, Reference: "the model"},
			match: true, script: []string{"_scratch_unmount\n_check_scratch_fs"}, calls: []string{"scratch_unmount", "check_scratch_fs"}, golden: "step 9: ok\n"},
		{name: "crash-lost", in: FSTests{Finding: Finding{ID: "f-0a", Kind: KindCrash, Trace: []string{"rename seed g", "fsync g"}}, Reference: "the model",
			Crash: &FSTestsCrash{Setup: []string{"create seed 0644", "write seed 0 4096 0x55"}, SetupSync: true, Kept: 3, Writes: 3, Flushes: 1, LogFlushes: 1, Lost: true}},
			match: true, script: []string{"_require_dm_target flakey", ". ./common/dmflakey", "_cleanup_flakey", "_init_flakey\n_scratch_mount", "\nsync\n", "_flakey_drop_and_remount"},
			calls: []string{"require_dm_target flakey", "init_flakey", "scratch_mount", "flakey_drop_and_remount", "scratch_unmount", "cleanup_flakey"}, golden: "step 2: ok\nthe fsynced file is intact after the power cut\n"},
		{name: "crash-fsck", in: FSTests{Finding: Finding{ID: "f-0b", Kind: KindCrash, Trace: []string{"mkdir d 0755", "sync"}}, Reference: "the model",
			Crash: &FSTestsCrash{Kept: 5, Writes: 5, Flushes: 2, LogFlushes: 2}},
			match: true, calls: []string{"flakey_drop_and_remount", "scratch_unmount", "check_scratch_fs"}, golden: "step 2: ok\n"},
		{name: "seek-answer", in: FSTests{Finding: Finding{ID: "f-0d", Kind: KindSeekAnswer, Path: "f", Field: "seek", Trace: sparse}, Reference: "the model"},
			match: true, script: []string{`_require_xfs_io_command "seek"`, `$XFS_IO_PROG -r -c "seek -a -r 0" "$SCRATCH_MNT/$p"`},
			calls: []string{"require_xfs_io_command seek"}, golden: "step 3: ok\nlseek's data and hole answers lie within the file\n"},
		{name: "seek-answer-past-size", in: FSTests{Finding: Finding{ID: "f-0e", Kind: KindSeekAnswer, Path: "f", Field: "seek", Trace: sparse}, Reference: "the model"},
			xfsIO: "Whence\tResult\nDATA\t0\nHOLE\t9223372036854775807", golden: "step 3: ok\nlseek's data and hole answers lie within the file\n",
			out: "lseek answered HOLE at 9223372036854775807, past the size 1052672\n"},
		{name: "seek-answer-before-offset", in: FSTests{Finding: Finding{ID: "f-0f", Kind: KindSeekAnswer, Path: "f", Field: "seek", Trace: sparse}, Reference: "the model"},
			xfsIO: "Whence\tResult\nDATA\t1048576\n>&2 Invalid seek result: lseek(<fd>, 1048576, SEEK_HOLE) = -9223372036854775808", golden: "step 3: ok\nlseek's data and hole answers lie within the file\n",
			out: "Invalid seek result: lseek(<fd>, 1048576, SEEK_HOLE) = -9223372036854775808\n"},
		{name: "xattr-and-renameat2", in: FSTests{Finding: Finding{ID: "f-0c", Kind: KindErrno, Trace: []string{"create a 0644", "create b 0644", "setxattr a user.k v", "removexattr a user.k", "rename a b noreplace"}}, Errno: int(syscall.EEXIST), Reference: "lane ext4"},
			script: []string{". ./common/attr", "_require_attrs", ". ./common/renameat2", "_require_renameat2 noreplace", `$here/src/renameat2 -n ./a ./b`},
			calls:  []string{"require_attrs", "require_renameat2 noreplace"}, golden: "step 5: File exists\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Name, in.Lane, in.Mkfs, in.Finding.Detail = "ext4/042", ext2Lane(), []string{"-I", "128"}, "what differs"
			files, err := FSTestsFiles(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != 2 || files["042"] == nil || files["042.out"] == nil {
				t.Fatalf("files %v, want 042 and 042.out", keys(files))
			}
			script := string(files["042"])
			if want := "QA output created by 042\n" + tc.golden; string(files["042.out"]) != want {
				t.Errorf("042.out:\n%s\nwant:\n%s", files["042.out"], want)
			}
			for _, w := range append([]string{"#! /bin/bash\n", "# FS QA Test No. 042\n", "\n. ./common/preamble\n_begin_fstest ", "\nstatus=0\nexit\n"}, tc.script...) {
				if !strings.Contains(script, w) {
					t.Errorf("script has no %q:\n%s", w, script)
				}
			}
			if err := exec.Command("bash", "-n", "-c", script).Run(); err != nil {
				t.Errorf("bash -n: %v", err)
			}
			if tc.name == "xattr-and-renameat2" {
				return // src/renameat2 is fstests' own program
			}
			e := newFSTestsEnv(t, in.Name, files)
			var env []string
			if tc.xfsIO != "" {
				env = append(env, "XFS_IO_PROG="+fakeXFSIO(t, tc.xfsIO))
			}
			out := e.run(t, in.Name, "ext2", env...)
			if got := out == string(files["042.out"]); got != tc.match {
				t.Errorf("output matches the golden one: %v, want %v\noutput:\n%s\ngolden:\n%s\nscript:\n%s", got, tc.match, out, files["042.out"], script)
			}
			if !strings.Contains(out, tc.out) {
				t.Errorf("output has no %q:\n%s", tc.out, out)
			}
			for _, c := range tc.calls {
				if !strings.Contains(e.calls(t), c+"\n") {
					t.Errorf("the test did not call %s; calls:\n%s", c, e.calls(t))
				}
			}
			if mkfs, _ := os.ReadFile(filepath.Join(e.log, "mkfs")); !bytes.Equal(mkfs, []byte("-I\x00128\x00")) {
				t.Errorf("_scratch_mkfs got %q, want -I 128", mkfs)
			}
		})
	}
}

// fakeXFSIO writes a stand-in for xfs_io that ignores its arguments and
// prints lines: each to stdout, or to stderr where it starts with ">&2 ".
func fakeXFSIO(t *testing.T, lines string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, l := range strings.Split(lines, "\n") {
		if e, ok := strings.CutPrefix(l, ">&2 "); ok {
			fmt.Fprintf(&b, "printf '%%s\\n' %s >&2\n", shQuote(e))
		} else {
			fmt.Fprintf(&b, "printf '%%s\\n' %s\n", shQuote(l))
		}
	}
	p := filepath.Join(t.TempDir(), "xfs_io")
	if err := os.WriteFile(p, []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// shQuote is s in single quotes for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestFSTestsNotRun: a test run as another filesystem than the lane's
// says so and runs nothing.
func TestFSTestsNotRun(t *testing.T) {
	files, err := FSTestsFiles(FSTests{Name: "generic/001", Finding: Finding{ID: "f-1", Kind: KindErrno, Trace: []string{"mkdir d 0755"}}, Lane: ext2Lane()})
	if err != nil {
		t.Fatal(err)
	}
	e := newFSTestsEnv(t, "generic/001", files)
	if out := e.run(t, "generic/001", "xfs"); !strings.Contains(out, "NOTRUN: Themis finding f-1 is about ext2, not xfs") {
		t.Errorf("output %q: want a NOTRUN line", out)
	}
	if _, err := os.Stat(filepath.Join(e.scratch, "d")); !os.IsNotExist(err) {
		t.Errorf("the op ran: %v", err)
	}
}

// TestFSTestsRefused: what a test cannot express is an error that says why.
func TestFSTestsRefused(t *testing.T) {
	t.Parallel()
	base := func(kind string) FSTests {
		return FSTests{Name: "ext4/001", Lane: ext2Lane(), Finding: Finding{ID: "f-1", Kind: kind, Trace: []string{"create f 0644", "fsync f"}, Field: "mode"}, Value: "0644"}
	}
	tests := []struct {
		name string
		in   func() FSTests
		want string
	}{
		{"bad name", func() FSTests { t := base(KindErrno); t.Name = "ext4/1"; return t }, "want DIR/NNN"},
		{"name with a path", func() FSTests { t := base(KindErrno); t.Name = "../x/001"; return t }, "want DIR/NNN"},
		{"no trace", func() FSTests { t := base(KindErrno); t.Finding.Trace = nil; return t }, "no trace"},
		{"kernel", func() FSTests { return base(KindKernel) }, "kernel finding: not exported as fstests"},
		{"other kind", func() FSTests { return base("size-limit") }, `is a "size-limit"`},
		{"seek-answer without a path", func() FSTests { return base(KindSeekAnswer) }, "names no file"},
		{"content", func() FSTests { t := base(KindState); t.Finding.Field = "content"; return t }, "content is known only as the agent's hash"},
		{"no value", func() FSTests { t := base(KindState); t.Value = ""; return t }, "no expected value"},
		{"torn crash", func() FSTests {
			t := base(KindCrash)
			t.Crash = &FSTestsCrash{Kept: 2, Writes: 5, Flushes: 1, LogFlushes: 1, Lost: true}
			return t
		}, "keeps 2 of 5 writes after 1 of 1 flushes"},
		{"fdatasync lost", func() FSTests {
			t := base(KindCrash)
			t.Finding.Trace = []string{"create f 0644", "fdatasync f"}
			t.Crash = &FSTestsCrash{Lost: true}
			return t
		}, "an fdatasync's promises no name"},
		{"set-clock", func() FSTests { t := base(KindErrno); t.Finding.Trace = []string{"set-clock 5"}; return t }, "not exported as fstests"},
		{"direct write", func() FSTests {
			t := base(KindErrno)
			t.Finding.Trace = []string{"write f 0 4096 0x1 direct"}
			return t
		}, "O_DIRECT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FSTestsFiles(tc.in())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestFSTestsHostile renders a test from a finding whose every string is
// hostile and runs it against the stub checkout: it parses, no payload
// runs, the mkfs gets its options intact, the script has no control
// character but newlines and tabs, and the golden output is the fixed
// lines (nothing of the finding's strings).
func TestFSTestsHostile(t *testing.T) {
	needFSTestsTools(t)
	sentinels := t.TempDir()
	h := hostile(sentinels)
	for _, kind := range []string{KindState, KindRemount, KindCrash, KindSeekAnswer} {
		t.Run(kind, func(t *testing.T) {
			in := FSTests{Name: "ext4/007", Lane: Lane{Spec: h, FS: h, MountOptions: h}, Mkfs: []string{h, "-I"}, Reference: h, Value: "0644", Version: h,
				Finding: Finding{ID: h, Kind: kind, Detail: h, Path: h, Field: "mode", Trace: hostileTrace(t, h), Revert: "remount"}}
			if kind == KindCrash {
				in.Crash = &FSTestsCrash{Setup: hostileTrace(t, h), Kept: 1, Writes: 1}
			}
			files, err := FSTestsFiles(in)
			if err != nil {
				t.Fatal(err)
			}
			script := string(files["007"])
			if err := exec.Command("bash", "-n", "-c", script).Run(); err != nil {
				t.Fatalf("bash -n: %v\n%s", err, script)
			}
			for _, r := range script {
				if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == '\u202e' {
					t.Fatalf("script holds control character %U", r)
				}
			}
			if strings.Contains(string(files["007.out"]), "pwned") {
				t.Errorf("golden output holds the finding's strings:\n%s", files["007.out"])
			}
			e := newFSTestsEnv(t, in.Name, files)
			out := e.run(t, in.Name, h)
			if !strings.HasPrefix(out, "QA output created by 007\n") || strings.Contains(out, "NOTRUN") {
				t.Errorf("the test did not run as the lane's FSTYP:\n%s", out)
			}
			sentinelsTouched(t, sentinels, kind)
			if mkfs, _ := os.ReadFile(filepath.Join(e.log, "mkfs")); string(mkfs) != h+"\x00-I\x00" {
				t.Errorf("_scratch_mkfs got %q", mkfs)
			}
		})
	}
}

func keys(f Files) []string {
	var out []string
	for k := range f {
		out = append(out, k)
	}
	return out
}

// sameMount is trace with its op i marked to run in the mount of the op
// before (opspec's same-mount).
func sameMount(trace []string, i int) []string {
	out := slices.Clone(trace)
	out[i] = "same-mount " + out[i]
	return out
}
