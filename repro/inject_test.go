package repro

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"

	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/oracle"
)

// hostile is a string that runs a command wherever a shell reads it
// unquoted, in double quotes, in single quotes it can close, or in a
// comment it can end (each payload creates a file under sentinels), and
// that breaks a C source it is pasted into raw (#error on a line of its
// own, a comment or string closed, a line spliced, a trigraph), with
// terminal escapes and a bidirectional override besides.
func hostile(sentinels string) string {
	p := func(i int) string { return filepath.Join(sentinels, fmt.Sprintf("pwned-%d", i)) }
	return strings.Join([]string{
		"x$(>" + p(0) + ")",
		"`>" + p(1) + "`",
		"\n>" + p(2) + "\n",
		"'; >" + p(3) + "; '",
		`"; >` + p(4) + `; "`,
		"${IFS}$(>" + p(5) + ")",
		"\r\n>" + p(6) + " #",
		"\\\n>" + p(7) + "\n",
		"*/\n#error a comment closed\n/*",
		"\"\n#error a string closed\n\"",
		"??/\n#error a trigraph\n",
		"end of a // comment\\",
		"\x1b[31mred\u202eevil\x7f\xff",
	}, "|")
}

// sentinelsTouched fails t for every file a payload created.
func sentinelsTouched(t *testing.T, dir, what string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s: injected command ran: %s exists", what, e.Name())
	}
}

// hostileTrace is a trace whose path, symlink target and xattr value are h
// (the JSON op form takes any valid UTF-8).
func hostileTrace(t *testing.T, h string) []string {
	t.Helper()
	h = strings.ToValidUTF8(h, "")
	ops := []*themisv1.Op{
		{Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: h, Mode: 0o755}}},
		{Op: &themisv1.Op_Symlink{Symlink: &agentv1.Symlink{Target: h, Path: "s-00"}}},
	}
	out := []string{"mkdir d*/??/ 0755"}
	for _, op := range ops {
		b, err := protojson.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// hostileInput is a finding whose every string is h; tool and after are
// the mkfs and after-mkfs programs.
func hostileInput(t *testing.T, h, tool, after string, kind string) Input {
	lane := Lane{Spec: h, FS: h, SizeMiB: 1, MountOptions: h, Package: h,
		Mkfs: baseimage.Command{Tool: tool, Args: []string{"-L", h}, Env: []string{"HOSTILE=" + h}, After: [][]string{{after, h}}, GoOnly: h}}
	return Input{
		Finding: Finding{ID: h, Kind: kind, Detail: h, Path: h, Field: h, Trace: hostileTrace(t, h), Revert: "remount"},
		Lanes:   []Lane{lane, lane}, Policy: oracle.MetisParity, Kernel: h, Version: h,
		Image: &Image{Kernel: h, Key: h, Patches: []ImageInput{{Name: h, BLAKE3: h, File: h}, {Name: h, BLAKE3: h}},
			Sources: []ImageInput{{Name: h, BLAKE3: h}}, Stock: &Stock{Kernel: h}},
	}
}

// stubs makes a directory of stand-ins for the programs the scripts run as
// root or that would touch the host (id, cc, mount, mkfs, ...), each
// logging its argv (NUL-separated, one file a call) under log.
func stubs(t *testing.T, log string, names ...string) string {
	t.Helper()
	dir := nobodyDir(t)
	script := `#!/bin/bash
name=${0##*/}
printf '%s\0' "$name" "$@" >"$(mktemp "$STUB_LOG/call.XXXXXX")"
case $name in
id) echo "${STUB_UID:-0}" ;;
cc) while [ $# -gt 1 ]; do
	if [ "$1" = -o ]; then printf '#!/bin/sh\nexit 0\n' >"$2"; chmod +x "$2"; fi
	shift
done ;;
grep) [ -z "${STUB_GREP_FAIL:-}" ] || exit 1 ;;
mount) [ -z "${STUB_MOUNT_FAIL:-}" ] || exit 32 ;;
mountpoint) exit 1 ;;
esac
exit 0
`
	stub := filepath.Join(dir, "stub")
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]string{"id", "cc", "grep", "modprobe", "mount", "umount", "mountpoint"}, names...) {
		if err := os.Symlink(stub, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nobodyDir is a t.TempDir that uid nobody can search and read too (as
// root check.sh runs its tools as nobody; a TempDir's root is 0700).
func nobodyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// calls are the logged argvs of the stub name.
func calls(t *testing.T, log, name string) [][]string {
	t.Helper()
	ents, err := os.ReadDir(log)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(log, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if argv[0] == name {
			out = append(out, argv[1:])
		}
	}
	return out
}

// runScript runs a generated script under bash with the stubs first on
// PATH and returns its exit status and output.
func runScript(t *testing.T, script, stubDir, log string, env []string, args ...string) (int, string) {
	t.Helper()
	if err := os.RemoveAll(log); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(log, 0o755); err != nil {
		t.Fatal(err)
	}
	// check.sh runs its tools as nobody: they log too.
	if err := os.Chmod(log, 0o1777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append([]string{"PATH=" + stubDir + ":/usr/sbin:/usr/bin:/sbin:/bin", "STUB_LOG=" + log, "LC_ALL=C"}, env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestGenerateHostile renders repro.c, repro.sh and README from a finding
// whose every string is hostile (Generate does not validate lane specs:
// the API does; this is the second end) and checks that nothing in it
// runs: repro.sh parses, and run to its end with stand-ins for the host's
// root-only programs (and to its early exits) creates no sentinel and hands
// the mkfs and mount their arguments intact; repro.c compiles with every
// warning an error and prints each step's name as the trace has it; the
// README has no control character but newlines and tabs.
func TestGenerateHostile(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		needTools(t, err)
	}
	sentinels := t.TempDir()
	h := hostile(sentinels)
	log := filepath.Join(t.TempDir(), "log")
	stubDir := stubs(t, log, "mkfs.stub", "tune.stub")
	tests := []struct {
		name  string
		in    Input
		env   []string
		want  int
		mkfsd bool // the run reaches mkfs
	}{
		{"to the end", hostileInput(t, h, "mkfs.stub", "tune.stub", KindState), nil, 1, true},
		{"errno kind", hostileInput(t, h, "mkfs.stub", "tune.stub", KindErrno), nil, 1, true},
		{"not root", hostileInput(t, h, "mkfs.stub", "tune.stub", KindState), []string{"STUB_UID=1000"}, 2, false},
		{"cannot mount", hostileInput(t, h, "mkfs.stub", "tune.stub", KindState), []string{"STUB_GREP_FAIL=1"}, 3, false},
		{"hostile mkfs", hostileInput(t, h, h, h, KindState), nil, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := Generate(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			dir := writeFiles(t, files)
			script := filepath.Join(dir, "repro.sh")
			if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
				t.Fatalf("bash -n repro.sh: %v\n%s", err, out)
			}
			env := append([]string{"REPRO_WORK=" + filepath.Join(dir, "work")}, tt.env...)
			code, out := runScript(t, script, stubDir, log, env)
			sentinelsTouched(t, sentinels, "repro.sh")
			if code != tt.want {
				t.Errorf("repro.sh exit %d, want %d:\n%s", code, tt.want, out)
			}
			if tt.mkfsd {
				checkArgv(t, calls(t, log, "mkfs.stub"), []string{"-L", h, filepath.Join(dir, "work", "lane0.img")}, "mkfs")
				checkArgv(t, calls(t, log, "tune.stub"), []string{h, filepath.Join(dir, "work", "lane0.img")}, "after-mkfs")
				checkArgv(t, calls(t, log, "mount"), []string{"-o", "loop," + h, filepath.Join(dir, "work", "lane0.img"), filepath.Join(dir, "work", "mnt0")}, "mount")
				if !strings.Contains(out, "the finding was made on: "+h+"\n") {
					t.Errorf("repro.sh does not echo the kernel as it is:\n%s", out)
				}
			}
			checkC(t, cc, dir, tt.in.Finding.Trace)
			checkText(t, "README", files["README"])
		})
	}
}

// checkArgv fails unless one of got is want.
func checkArgv(t *testing.T, got [][]string, want []string, what string) {
	t.Helper()
	for _, argv := range got {
		if strings.Join(argv, "\x00") == strings.Join(want, "\x00") {
			return
		}
	}
	t.Errorf("%s: no call with argv %q; calls: %q", what, want, got)
}

// checkC compiles dir/repro.c with every warning an error, and checks that
// step 0 prints its name as the trace has it.
func checkC(t *testing.T, cc, dir string, trace []string) {
	t.Helper()
	bin := filepath.Join(dir, "repro")
	if out, err := exec.Command(cc, "-Wall", "-Wextra", "-Werror", "-o", bin, filepath.Join(dir, "repro.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "steps").Output()
	if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(len(trace)) {
		t.Errorf("repro steps: %q, %v; want %d", out, err, len(trace))
	}
	lane := t.TempDir()
	for i, op := range trace {
		out, err := exec.Command(bin, "step", fmt.Sprint(i), "l", lane).Output()
		if err != nil || !bytes.Contains(out, []byte(": "+op+": ret ")) {
			t.Errorf("repro step %d: %q, %v; want the name %q", i, out, err, op)
		}
	}
}

// checkText fails on a control character other than newline and tab, or
// a bidirectional override, in a plain-text file.
func checkText(t *testing.T, name string, b []byte) {
	t.Helper()
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == '\u202e' || r == '\ufffd' {
			t.Errorf("%s has %U", name, r)
		}
	}
}

// TestCrashFilesHostile is TestGenerateHostile's check of a crash
// finding's check.sh and README: every string hostile, check.sh parses and
// runs to each of its exits (with and without --mount, a mount that fails,
// a checker missing) without running a payload, handing the checker and
// the mount their arguments intact.
func TestCrashFilesHostile(t *testing.T) {
	sentinels := t.TempDir()
	h := hostile(sentinels)
	log := filepath.Join(nobodyDir(t), "log")
	stubDir := stubs(t, log, "checker.stub", "recover.stub")
	crash := func(check string) Crash {
		return Crash{ID: h, Detail: h, Spec: h, FS: h, MountOptions: h, Setup: []string{h}, Trace: []string{h}, State: h, Keep: h, InFlight: h,
			Verdict: h, Durability: h, Output: h + "\n" + h, Check: []string{check, h}, Recover: []string{"recover.stub", h}, Package: h, Version: h}
	}
	if _, err := CrashFiles(crash("checker.stub")); err == nil || !strings.Contains(err.Error(), "more than one line") {
		t.Errorf("CrashFiles with an op of several lines: %v, want it refused", err)
	}
	oneLine := strings.NewReplacer("\n", " ", "\r", " ").Replace(h)
	mount := []string{"--mount", "--untrusted-ok"}
	tests := []struct {
		name  string
		check string
		args  []string
		env   []string
		want  int
		mount bool // the run mounts
	}{
		{"host replay", "checker.stub", nil, nil, 1, false},
		{"mount", "checker.stub", mount, nil, 1, true},
		{"mount fails", "checker.stub", mount, []string{"STUB_MOUNT_FAIL=1"}, 0, true},
		{"mount not root", "checker.stub", mount, []string{"STUB_UID=1000"}, 2, false},
		{"mount unconfirmed", "checker.stub", []string{"--mount"}, nil, 2, false},
		{"untrusted-ok alone", "checker.stub", []string{"--untrusted-ok"}, nil, 2, false},
		{"no checker", "missing.stub", nil, nil, 2, false},
		{"hostile checker", h, nil, nil, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := crash(tt.check)
			c.Setup, c.Trace = []string{oneLine}, []string{oneLine}
			files, err := CrashFiles(c)
			if err != nil {
				t.Fatal(err)
			}
			dir := writeFiles(t, files)
			if err := os.WriteFile(filepath.Join(dir, "crash.img"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			script := filepath.Join(dir, "check.sh")
			if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
				t.Fatalf("bash -n check.sh: %v\n%s", err, out)
			}
			code, out := runScript(t, script, stubDir, log, tt.env, tt.args...)
			sentinelsTouched(t, sentinels, "check.sh")
			if code != tt.want {
				t.Errorf("check.sh exit %d, want %d:\n%s", code, tt.want, out)
			}
			if tt.want == 1 {
				if got := calls(t, log, "checker.stub"); len(got) != 1 || len(got[0]) != 2 || got[0][0] != h {
					t.Errorf("checker argv %q, want [%q IMAGE]", got, h)
				}
			}
			if got := calls(t, log, "mount"); tt.mount && (len(got) != 1 || len(got[0]) != 6 || got[0][1] != "loop,"+h || got[0][3] != h) {
				t.Errorf("mount argv %q, want [-o loop,%q -t %q IMAGE DIR]", got, h, h)
			} else if !tt.mount && len(got) != 0 {
				t.Errorf("mount argv %q, want no mount", got)
			}
			if w := strings.Index(out, "a crafted image can exploit the host kernel"); slices.Contains(tt.args, "--mount") &&
				(w < 0 || strings.Contains(out, "== mount") && strings.Index(out, "== mount") < w) {
				t.Errorf("check.sh --mount did not warn before it mounts:\n%s", out)
			}
			checkText(t, "README", files["README"])
		})
	}
}

// TestTemplatesNeedEscapers: a template that prints a text without an
// escaper fails to render instead of writing it raw.
func TestTemplatesNeedEscapers(t *testing.T) {
	t.Parallel()
	tmpl := template.Must(template.New("t").Funcs(escapers).Parse(`{{sh .A}} {{.B}}`))
	_, err := render(tmpl, "t", struct{ A, B text }{"a", "$(id)"})
	if err == nil || !strings.Contains(err.Error(), "without an escaper") {
		t.Errorf("render of a raw text: %v, want it refused", err)
	}
	tests := []struct{ fn, in, want string }{
		{"sh", "a b", `'a b'`},
		{"sh", "it's", `'it'\''s'`},
		{"shcomment", "a\nrm -rf /", `a\x0arm -rf /`},
		{"cstr", "a\"b\\c\n??/", `"a\"b\\c\012\077\077/"`},
		{"ccomment", "*/ x /* y \\\n??/", `*\x2f x /\x2a y \x5c\x0a?\x3f/`},
		{"line", "a\x1b[31m\u202e", `a\x1b[31m\u202e`},
		{"para", "a\nb\rc", "a\nb\\x0dc"},
	}
	for _, tt := range tests {
		tmpl := template.Must(template.New("t").Funcs(escapers).Parse(`{{` + tt.fn + ` .}}`))
		got, err := render(tmpl, "t", text(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("%s(%q) = %s, %v; want %s", tt.fn, tt.in, got, err, tt.want)
		}
	}
	join := template.Must(template.New("t").Funcs(escapers).Parse(`{{join .}}`))
	if got, err := render(join, "t", []text{"A=$(id)", "B=1", "c d"}); err != nil || string(got) != `'A=$(id)' B=1 'c d'` {
		t.Errorf("join = %s, %v; want the first word no assignment", got, err)
	}
	if got, err := render(join, "t", []text{"A=1"}); err != nil || string(got) != `'A=1'` {
		t.Errorf("join = %s, %v; want the first word no assignment", got, err)
	}
}

// FuzzEscapers: whatever the input, a shell or C comment stays one line
// that cannot end a C comment or splice the next line, a C string is one
// printable ASCII line, and a shell word is one word.
func FuzzEscapers(f *testing.F) {
	for _, s := range []string{"", "a b", "*/\n#error x", "??/", "\\", "'$(id)'", "\x1b\u202e\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, got := range map[string]string{"shcomment": printable(s, false), "ccomment": cComment(s), "cstr": cStr(s)} {
			if strings.ContainsAny(got, "\n\r") {
				t.Errorf("%s(%q) = %q: more than one line", name, s, got)
			}
		}
		c := cComment(s)
		if strings.Contains(c, "*/") || strings.Contains(c, "/*") || strings.Contains(c, "??") {
			t.Errorf("cComment(%q) = %q", s, c)
		}
		for i := strings.IndexByte(c, '\\'); i >= 0; i = strings.IndexByte(c, '\\') {
			if i+1 == len(c) || !strings.ContainsRune("xuU", rune(c[i+1])) {
				t.Errorf("cComment(%q) = %q: a backslash not of an escape", s, cComment(s))
				break
			}
			c = c[i+1:]
		}
		for _, r := range cStr(s) {
			if r < 0x20 || r >= 0x7f {
				t.Errorf("cStr(%q) holds %U", s, r)
			}
		}
		if q := shellQuote(s); !plainWord.MatchString(q) && !(strings.HasPrefix(q, "'") && strings.HasSuffix(q, "'")) {
			t.Errorf("shellQuote(%q) = %q: not one word", s, q)
		}
	})
}
