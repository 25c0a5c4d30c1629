package kreport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestParse reads report texts of the shapes Linux 6.1 prints (testdata)
// into their kind, first line, RIP, call trace and panic message.
func TestParse(t *testing.T) {
	cases := []struct {
		file  string
		want  *Report // Text left out: checked by TestParseText
		found bool
	}{
		{"bug.txt", &Report{Kind: Bug, Title: "kernel BUG at fs/ext4/namei.c:3477!", RIP: "ext4_link+0x1c/0x90 [ext4]",
			Trace: []string{"vfs_link+0x1e2/0x330", "do_linkat+0x2e6/0x310", "__x64_sys_linkat+0x44/0x60", "do_syscall_64+0x55/0xb0", "entry_SYSCALL_64_after_hwframe+0x6e/0xd8"},
			Panic: "Fatal exception"}, true},
		{"nullderef.txt", &Report{Kind: Oops, Title: "BUG: kernel NULL pointer dereference, address: 0000000000000008", RIP: "ext4_rename+0x3c/0x3a0 [ext4]",
			Trace: []string{"ext4_rename2+0x5a/0xa0 [ext4]", "vfs_rename+0x6ac/0xbc0", "do_renameat2+0x4f5/0x5a0", "__x64_sys_renameat2+0x4b/0x60", "do_syscall_64+0x55/0xb0", "entry_SYSCALL_64_after_hwframe+0x6e/0xd8"},
			Panic: "Fatal exception"}, true},
		{"warning.txt", &Report{Kind: Warning, Title: "WARNING: CPU: 0 PID: 187 at fs/ext4/inode.c:3710 ext4_dirty_folio+0x58/0x70 [ext4]", RIP: "ext4_dirty_folio+0x58/0x70 [ext4]",
			Trace: []string{"folio_mark_dirty+0x2f/0x60", "ext4_page_mkwrite+0x36e/0x5f0 [ext4]", "do_page_mkwrite+0x57/0xc0", "do_wp_page+0x1d0/0x540", "__handle_mm_fault+0x8d4/0xcf0"},
			Panic: "kernel: panic_on_warn set ..."}, true},
		{"gpf.txt", &Report{Kind: GPF, Title: "general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] PREEMPT SMP NOPTI", RIP: "__list_del_entry_valid+0x25/0xc0",
			Trace: []string{"writeback_sb_inodes+0x1d3/0x4f0", "__writeback_inodes_wb+0x4c/0xf0", "wb_writeback+0x1d8/0x2c0", "wb_workfn+0x2a1/0x400", "process_one_work+0x1c7/0x380", "worker_thread+0x4d/0x380", "kthread+0xd7/0x100", "ret_from_fork+0x1f/0x30"},
			Panic: "Fatal exception"}, true},
		{"softlockup.txt", &Report{Kind: SoftLockup, Title: "watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [themis-agent:187]", RIP: "ext4_mb_regular_allocator+0x2a0/0xe30 [ext4]",
			Trace: []string{"ext4_mb_new_blocks+0x8e0/0xf90 [ext4]", "ext4_ext_map_blocks+0x6a8/0x1830 [ext4]", "ext4_map_blocks+0x1c1/0x610 [ext4]"},
			Panic: "softlockup: hung tasks"}, true},
		{"hungtask.txt", &Report{Kind: HungTask, Title: "INFO: task kworker/u2:1:45 blocked for more than 120 seconds.",
			Trace: []string{"__schedule+0x34d/0x9e0", "schedule+0x5a/0xd0", "io_schedule+0x42/0x70", "bit_wait_io+0xd/0x60", "__wait_on_bit+0x4b/0x140"},
			Panic: "hung_task: blocked tasks"}, true},
		{"kasan.txt", &Report{Kind: KASAN, Title: "BUG: KASAN: use-after-free in ext4_xattr_set_entry+0x1b9c/0x1c50",
			Trace: []string{"dump_stack_lvl+0x49/0x63", "print_report+0x171/0x4a8", "kasan_report+0xb1/0x130", "ext4_xattr_set_entry+0x1b9c/0x1c50", "ext4_xattr_ibody_set+0x7a/0x2a0", "ext4_xattr_set_handle+0x78d/0x1020"},
			Panic: "KASAN: panic_on_warn set ..."}, true},
		{"ubsan.txt", &Report{Kind: UBSAN, Title: "UBSAN: shift-out-of-bounds in fs/ext4/super.c:4190:25",
			Trace: []string{"dump_stack_lvl+0x44/0x5c", "ubsan_epilogue+0x5/0x40", "__ubsan_handle_shift_out_of_bounds.cold+0x61/0xef", "ext4_fill_super+0x2c5c/0x3a80 [ext4]", "mount_bdev+0x185/0x1b0"}}, true},
		// A real console: the guest of TestKernelCrashRealGuest
		// (runs/exploration), its kernel crashed by sysrq-c.
		{"sysrq.txt", &Report{Kind: Panic, Title: "Kernel panic - not syncing: sysrq triggered crash", Panic: "sysrq triggered crash",
			Trace: []string{"dump_stack_lvl+0x44/0x5c", "panic+0x118/0x2f4", "sysrq_handle_crash+0x16/0x20", "__handle_sysrq.cold+0x41/0x11c",
				"write_sysrq_trigger+0x24/0x40", "proc_reg_write+0x53/0xa0", "vfs_write+0xc4/0x3f0", "ksys_write+0x6b/0xf0", "do_syscall_64+0x5d/0x90",
				"entry_SYSCALL_64_after_hwframe+0x6e/0xd8"}}, true},
		// A real console: the guest of TestHungTaskRealGuest (runs/relay),
		// its agent's mkdir blocked on a frozen ext4 lane past the
		// detector's 30 s, hung_task_panic on (vmm.HungTaskCmdline): the
		// user-space RIP inside the trace is not the report's.
		{"hungtask-freeze.txt", &Report{Kind: HungTask, Title: "INFO: task init:1 blocked for more than 30 seconds.", Panic: "hung_task: blocked tasks",
			Trace: []string{"__schedule+0x34d/0xa00", "schedule+0x5a/0xd0", "percpu_rwsem_wait+0x116/0x140", "__percpu_down_read+0x64/0x120",
				"mnt_want_write+0x8b/0xc0", "filename_create+0x7c/0x1b0", "do_mkdirat+0x5f/0x170", "__x64_sys_mkdirat+0x47/0x80",
				"do_syscall_64+0x5d/0x90", "entry_SYSCALL_64_after_hwframe+0x6e/0xd8"}}, true},
		{"clean.txt", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			r, ok := Parse(string(b))
			if ok != tc.found {
				t.Fatalf("found %v (%+v), want %v", ok, r, tc.found)
			}
			if !ok {
				return
			}
			got := *r
			got.Text = ""
			if !reflect.DeepEqual(&got, tc.want) {
				t.Errorf("Parse =\n%#v\nwant\n%#v", &got, tc.want)
			}
		})
	}
}

// TestParseText: the report's text starts at its first line, without time
// prefixes, and ends with the panic's end marker.
func TestParseText(t *testing.T) {
	b, err := os.ReadFile("testdata/bug.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, ok := Parse(string(b))
	if !ok {
		t.Fatal("no report")
	}
	lines := strings.Split(r.Text, "\n")
	if lines[0] != "kernel BUG at fs/ext4/namei.c:3477!" || lines[len(lines)-1] != "---[ end Kernel panic - not syncing: Fatal exception ]---" {
		t.Errorf("text from %q to %q", lines[0], lines[len(lines)-1])
	}
	if strings.Contains(r.Text, "[   41.") {
		t.Errorf("text keeps time prefixes:\n%s", r.Text)
	}
}

// TestSignature: reports of one fault at other addresses, CPUs and PIDs
// share a signature; another place does not.
func TestSignature(t *testing.T) {
	a := &Report{Kind: Warning, Title: "WARNING: CPU: 0 PID: 187 at fs/x.c:12 f+0x1/0x2", RIP: "f+0x1/0x2 [ext4]"}
	b := &Report{Kind: Warning, Title: "WARNING: CPU: 1 PID: 190 at fs/x.c:12 f+0x1/0x2", RIP: "f+0x1/0x2 [ext4]"}
	c := &Report{Kind: Warning, Title: "WARNING: CPU: 1 PID: 190 at fs/x.c:40 g+0x1/0x2", RIP: "g+0x1/0x2 [ext4]"}
	p := &Report{Kind: Panic, Title: "Kernel panic - not syncing: sysrq triggered crash"}
	q := &Report{Kind: Panic, Title: "Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009"}
	if a.Signature() != b.Signature() || a.Signature() == c.Signature() || p.Signature() == q.Signature() {
		t.Errorf("signatures %q %q %q %q %q", a.Signature(), b.Signature(), c.Signature(), p.Signature(), q.Signature())
	}
	if got, want := a.Signature(), "warning|f [ext4]"; got != want {
		t.Errorf("signature %q, want %q", got, want)
	}
}

// TestParseBounds: however long the console, its lines and its trace,
// what Parse keeps is bounded, valid UTF-8 and free of control bytes.
func TestParseBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(strings.Repeat("noise\n", 50000))
	b.WriteString("kernel BUG at " + strings.Repeat("x\x00\xff\x1b", 10000) + "\n")
	b.WriteString("RIP: 0010:" + strings.Repeat("y", 5000) + "+0x1/0x2\n")
	b.WriteString("Call Trace:\n")
	for range 400 {
		b.WriteString(" f" + strings.Repeat("z", 400) + "+0x1/0x2\n")
	}
	b.WriteString(strings.Repeat("tail line\n", 1000))
	r, ok := Parse(b.String())
	if !ok {
		t.Fatal("no report")
	}
	checkBounds(t, r)
	if len(r.Trace) != MaxTrace {
		t.Errorf("%d trace lines, want %d", len(r.Trace), MaxTrace)
	}
}

func checkBounds(t *testing.T, r *Report) {
	t.Helper()
	fields := append([]string{r.Title, r.RIP, r.Panic}, r.Trace...)
	for _, f := range fields {
		if len(f) > MaxLine || !utf8.ValidString(f) || strings.ContainsFunc(f, func(c rune) bool { return c < 0x20 && c != '\t' }) {
			t.Fatalf("field of %d bytes, or invalid: %q", len(f), f)
		}
	}
	if len(r.Trace) > MaxTrace || len(r.Text) > MaxText || strings.Count(r.Text, "\n") >= MaxTextLines || !utf8.ValidString(r.Text) {
		t.Fatalf("trace %d lines, text %d bytes in %d lines", len(r.Trace), len(r.Text), strings.Count(r.Text, "\n")+1)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse: whatever the console holds, Parse returns within its bounds,
// and a report's title is one of the console's lines.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"bug.txt", "warning.txt", "kasan.txt", "clean.txt", "hungtask.txt", "hungtask-freeze.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("Kernel panic - not syncing: \xff\nCall Trace:\n ? a+0x1/0x2\n b+0x1/0x2 [m]\n")
	f.Fuzz(func(t *testing.T, in string) {
		r, ok := Parse(in)
		if !ok {
			return
		}
		checkBounds(t, r)
		if r.Kind == "" || r.Title == "" {
			t.Fatalf("report %+v", r)
		}
	})
}

// TestStart: the line a report begins at, time prefix and all, in raw
// console lines; -1 without one.
func TestStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		console string
		want    int
	}{
		{"[    2.1] booted\n[    2.2] sysrq: Trigger a crash\n[    2.3] Kernel panic - not syncing: sysrq triggered crash\n[    2.4] Call Trace:", 2},
		{"ready\n[ 41.7] ------------[ cut here ]------------\n[ 41.7] kernel BUG at fs/ext4/namei.c:3477!\n[ 41.7] invalid opcode: 0000 [#1] SMP", 2},
		{"ready\nall well", -1},
	}
	for _, tt := range tests {
		if got := Start(strings.Split(tt.console, "\n")); got != tt.want {
			t.Errorf("Start(%q) = %d, want %d", tt.console, got, tt.want)
		}
	}
}
