package repro

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sysrqReport is the report of TestKernelCrashRealGuest's crash (the
// sysrq panic, kreport's testdata sysrq.txt), as a kernel finding stores it.
var sysrqReport = KernelReport{Kind: "panic", Title: "Kernel panic - not syncing: sysrq triggered crash", Panic: "sysrq triggered crash",
	Trace: []string{"dump_stack_lvl+0x44/0x5c", "panic+0x118/0x2f4", "sysrq_handle_crash+0x16/0x20"},
	Text:  "Kernel panic - not syncing: sysrq triggered crash\nCPU: 0 PID: 1 Comm: init Not tainted 6.1.0-57-cloud-amd64 #1\nCall Trace:\n <TASK>\n dump_stack_lvl+0x44/0x5c"}

// TestGenerateKernel: a kernel finding of one lane exports: repro.c
// compiles and names the trace's ops; repro.sh parses; both the README
// and repro.sh say that it crashes the kernel and must run in a VM, and
// the README holds the report (first line, RIP or its absence, panic,
// call trace, the console's text) and, for a finding of a patched image,
// the patch and the stock image's replay. A kernel finding without a
// report or lanes is refused.
func TestGenerateKernel(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		needTools(t, err)
	}
	bug := KernelReport{Kind: "bug", Title: "kernel BUG at fs/ext2/namei.c:12!", RIP: "ext2_mkdir+0x1c/0x90 [ext2]", Panic: "Fatal exception",
		Trace: []string{"vfs_mkdir+0x9c/0x140", "do_mkdirat+0x8a/0x140"}}
	patched := &Image{Kernel: "6.1.0-57-cloud-amd64 (cloud)", Key: "k1", Patches: []ImageInput{{Name: "ext2-mkdir.patch", BLAKE3: "b1", File: "patch-1-ext2-mkdir.patch"}},
		Stock: &Stock{Kernel: "6.1.0-57-cloud-amd64"}}
	tests := []struct {
		name   string
		report KernelReport
		image  *Image
		want   []string // in the README
	}{
		{"sysrq panic", sysrqReport, nil, []string{"first line   Kernel panic - not syncing: sysrq triggered crash", "RIP          none", "    sysrq_handle_crash+0x16/0x20",
			"  CPU: 0 PID: 1 Comm: init Not tainted 6.1.0-57-cloud-amd64 #1"}},
		{"BUG of a patched image", bug, patched, []string{"kind         bug", "first line   kernel BUG at fs/ext2/namei.c:12!", "RIP          ext2_mkdir+0x1c/0x90 [ext2]",
			"panic        Fatal exception", "    do_mkdirat+0x8a/0x140", "Needs a patched kernel", "here as patch-1-ext2-mkdir.patch", "does not reproduce: the change above causes it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.report
			trace := []string{"create f-00 0644", "mkdir d-00 0755"}
			files, err := Generate(Input{Finding: Finding{ID: "f-1", Kind: KindKernel, Detail: "the kernel crashed (" + r.Kind + ") running mkdir: " + r.Title,
				Trace: trace, Revert: "remount", Kernel: &r}, Lanes: lanesOf(t, "ext2"), Kernel: "6.1.0-57-cloud-amd64", Image: tt.image})
			if err != nil {
				t.Fatal(err)
			}
			dir := writeFiles(t, files)
			if out, err := exec.Command("bash", "-n", filepath.Join(dir, "repro.sh")).CombinedOutput(); err != nil {
				t.Errorf("bash -n repro.sh: %v\n%s", err, out)
			}
			checkC(t, cc, dir, trace)
			readme, sh := string(files["README"]), string(files["repro.sh"])
			for _, w := range append(tt.want, "THIS CRASHES THE KERNEL IT RUNS ON", "inside a throwaway VM", "sudo ./repro.sh --in-vm") {
				if !strings.Contains(readme, w) {
					t.Errorf("README has no %q:\n%s", w, readme)
				}
			}
			for _, w := range []string{"THIS CRASHES THE KERNEL IT RUNS ON", "throwaway VM", "--in-vm", "#   " + r.Title, "remount_all"} {
				if !strings.Contains(sh, w) {
					t.Errorf("repro.sh has no %q", w)
				}
			}
		})
	}
	for _, in := range []Input{
		{Finding: Finding{ID: "f-1", Kind: KindKernel, Trace: []string{"mkdir d-00 0755"}}, Lanes: lanesOf(t, "ext2")},
		{Finding: Finding{ID: "f-1", Kind: KindKernel, Trace: []string{"mkdir d-00 0755"}, Kernel: &sysrqReport}},
	} {
		if _, err := Generate(in); err == nil {
			t.Errorf("Generate of a kernel finding with report %v and %d lanes: no error", in.Finding.Kernel != nil, len(in.Lanes))
		}
	}
}

// TestKernelFilesHostile is TestGenerateHostile for a kernel finding:
// every string hostile, the report's too ($(...), backticks, newlines,
// quotes, terminal escapes in its first line, RIP, panic, trace and
// text). repro.sh parses; without --in-vm it refuses to run (exit 2, no
// mkfs), as non-root too; with it, run with stand-ins for the root-only
// programs, it hands mkfs and mount their arguments intact and ends
// "not reproduced" (exit 1) when the kernel log holds no new report, and
// "reproduced" (exit 0) when it does — a report line itself hostile. No
// payload runs; the README has no control character.
func TestKernelFilesHostile(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		needTools(t, err)
	}
	sentinels := t.TempDir()
	h := hostile(sentinels)
	log := filepath.Join(t.TempDir(), "log")
	stubDir := stubs(t, log, "mkfs.stub", "tune.stub")
	// dmesg prints nothing the first time (before the trace), then the
	// lines of $STUB_DMESG when set.
	dmesg := "#!/bin/bash\nif [ -e \"$STUB_LOG/dmesg.armed\" ] && [ -n \"${STUB_DMESG:-}\" ]; then cat \"$STUB_DMESG\"; fi\n: >\"$STUB_LOG/dmesg.armed\"\n"
	if err := os.WriteFile(filepath.Join(stubDir, "dmesg"), []byte(dmesg), 0o755); err != nil {
		t.Fatal(err)
	}
	kernelLog := filepath.Join(t.TempDir(), "dmesg.txt")
	if err := os.WriteFile(kernelLog, []byte("[ 2.1] booted\n[ 2.2] BUG: kernel NULL pointer dereference, address: "+strings.ReplaceAll(h, "\n", " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := KernelReport{Kind: h, Title: h, RIP: h, Panic: h, Trace: []string{h, h}, Text: h + "\n" + h}
	tests := []struct {
		name  string
		lanes int
		args  []string
		env   []string
		want  int
		mkfsd bool
	}{
		{"no --in-vm", 2, nil, nil, 2, false},
		{"another argument", 2, []string{h}, nil, 2, false},
		{"not root", 2, []string{"--in-vm"}, []string{"STUB_UID=1000"}, 2, false},
		{"nothing reported", 2, []string{"--in-vm"}, nil, 1, true},
		{"one lane", 1, []string{"--in-vm"}, nil, 1, true},
		{"reported", 2, []string{"--in-vm"}, []string{"STUB_DMESG=" + kernelLog}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := hostileInput(t, h, "mkfs.stub", "tune.stub", KindKernel)
			in.Finding.Kernel, in.Lanes = &report, in.Lanes[:tt.lanes]
			files, err := Generate(in)
			if err != nil {
				t.Fatal(err)
			}
			dir := writeFiles(t, files)
			script := filepath.Join(dir, "repro.sh")
			if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
				t.Fatalf("bash -n repro.sh: %v\n%s", err, out)
			}
			env := append([]string{"REPRO_WORK=" + filepath.Join(dir, "work")}, tt.env...)
			code, out := runScript(t, script, stubDir, log, env, tt.args...)
			sentinelsTouched(t, sentinels, "repro.sh")
			if code != tt.want {
				t.Errorf("repro.sh exit %d, want %d:\n%s", code, tt.want, out)
			}
			if got := calls(t, log, "mkfs.stub"); tt.mkfsd {
				checkArgv(t, got, []string{"-L", h, filepath.Join(dir, "work", "lane0.img")}, "mkfs")
				checkArgv(t, calls(t, log, "mount"), []string{"-o", "loop," + h, filepath.Join(dir, "work", "lane0.img"), filepath.Join(dir, "work", "mnt0")}, "mount")
			} else if len(got) != 0 {
				t.Errorf("mkfs ran %q: want repro.sh to stop first", got)
			}
			if tt.want == 2 && tt.env == nil && !strings.Contains(out, "this crashes the kernel it runs on") {
				t.Errorf("repro.sh without --in-vm does not say why:\n%s", out)
			}
			checkC(t, cc, dir, in.Finding.Trace)
			checkText(t, "README", files["README"])
		})
	}
}
