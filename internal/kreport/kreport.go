package kreport

import (
	"regexp"
	"strings"
	"unicode"
)

// Kind is what sort of fault a report is.
type Kind string

// The kinds of report.
const (
	// Oops: a fault the kernel could not handle (a NULL pointer
	// dereference, a page fault, an invalid opcode that is not a BUG).
	Oops Kind = "oops"
	// Bug: BUG() or BUG_ON() ("kernel BUG at file:line!"), or another
	// "BUG: " report (scheduling while atomic, a bad page state, ...).
	Bug Kind = "bug"
	// Warning: WARN() or WARN_ON() ("WARNING: CPU: n PID: n at ...").
	Warning Kind = "warning"
	// GPF: a general protection fault.
	GPF Kind = "gpf"
	// Panic: a panic with no report before it (panic() called directly,
	// sysrq-c).
	Panic Kind = "panic"
	// SoftLockup and HardLockup: the lockup watchdog's reports.
	SoftLockup Kind = "soft-lockup"
	HardLockup Kind = "hard-lockup"
	// HungTask: a task blocked past kernel.hung_task_timeout_secs.
	HungTask Kind = "hung-task"
	// KASAN and UBSAN: the sanitizers' reports (kernels built with them).
	KASAN Kind = "kasan"
	UBSAN Kind = "ubsan"
)

// Bounds on what Parse reads and keeps.
const (
	// MaxInput is how many bytes of the console Parse reads: the last.
	MaxInput = 1 << 20
	// MaxLine is the most bytes of one line kept.
	MaxLine = 512
	// MaxTrace is the most call trace lines kept.
	MaxTrace = 32
	// MaxTextLines and MaxText bound Report.Text.
	MaxTextLines = 160
	MaxText      = 16 << 10
	// maxTraceScan is how many lines past "Call Trace:" Parse looks at.
	maxTraceScan = 400
)

// Report is a kernel's fault report.
type Report struct {
	// Kind is what sort of fault it is.
	Kind Kind `json:"kind"`
	// Title is the report's first line ("kernel BUG at fs/ext4/inode.c:1234!",
	// "BUG: kernel NULL pointer dereference, address: 0000000000000008",
	// "Kernel panic - not syncing: sysrq triggered crash"), without the
	// time prefix.
	Title string `json:"title"`
	// RIP is where the faulting CPU was, symbol and offset
	// ("ext4_link+0x1c/0x90 [ext4]"); "" when the report has none (a
	// panic called directly prints its stack, not its registers).
	RIP string `json:"rip,omitempty"`
	// Trace is the call trace's functions, innermost first, as printed
	// ("vfs_mkdir+0x9c/0x140", with " [module]" for a module's), the
	// unreliable "? " frames left out.
	Trace []string `json:"trace,omitempty"`
	// Panic is the panic's message ("Fatal exception", "sysrq triggered
	// crash"); "" when the console holds no panic after the report.
	Panic string `json:"panic,omitempty"`
	// Text is the report's lines from its first on, to the panic's end
	// marker, bounded.
	Text string `json:"text,omitempty"`
}

// timePrefix is printk's time stamp, with the caller id when
// CONFIG_PRINTK_CALLER adds one.
var timePrefix = regexp.MustCompile(`^\[\s*\d+\.\d+\](\[\s*[CT]\d+\])? ?`)

// oopsHeader is __die_header's line: "Oops: 0000 [#1] PREEMPT SMP NOPTI",
// "invalid opcode: 0000 [#1] SMP".
var oopsHeader = regexp.MustCompile(`^[A-Za-z][A-Za-z ]*: [0-9a-f]{4} \[#\d+\]`)

// ripLine is the registers' first line: "RIP: 0010:ext4_foo+0x12/0x40 [ext4]".
var ripLine = regexp.MustCompile(`^RIP: [0-9a-f]{4}:(.+)$`)

// symbol is a symbol with offset and length, and its module.
var symbol = regexp.MustCompile(`[A-Za-z0-9_.$]+\+0x[0-9a-f]+/0x[0-9a-f]+( \[[A-Za-z0-9_-]+\])?`)

// frame is a call trace line, "? " marking an unreliable one.
var frame = regexp.MustCompile(`^(\? )?[A-Za-z0-9_.$]+\+0x[0-9a-f]+/0x[0-9a-f]+( \[[A-Za-z0-9_-]+\])?$`)

const panicPrefix = "Kernel panic - not syncing: "

// Parse finds the first kernel fault report in console text and returns
// it, or false when there is none.
func Parse(console string) (*Report, bool) {
	if len(console) > MaxInput {
		console = console[len(console)-MaxInput:]
	}
	lines := clean(strings.Split(console, "\n"))
	start := first(lines)
	if start < 0 {
		return nil, false
	}
	rest := lines[start:]
	r := &Report{Kind: classify(rest[0]), Title: rest[0], RIP: rip(rest), Trace: trace(rest), Panic: panicMessage(rest), Text: text(rest)}
	return r, true
}

// Start is the index of the line a kernel fault report begins at in
// console lines (raw, as Parse reads them: with time prefixes), -1 when
// none does: where a tail of the console must begin to hold the whole
// report that Parse would find.
func Start(lines []string) int {
	return first(clean(lines))
}

// first is the index of the first cleaned line that begins a report, or -1.
func first(lines []string) int {
	for i, l := range lines {
		if classify(l) != "" {
			return i
		}
	}
	return -1
}

// clean strips each line of its time prefix, "\r", invalid UTF-8 and
// control characters, and cuts it to MaxLine bytes.
func clean(raw []string) []string {
	out := make([]string, len(raw))
	for i, l := range raw {
		l = strings.ToValidUTF8(l, "\uFFFD")
		l = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) && r != '\t' {
				return -1
			}
			return r
		}, l)
		l = timePrefix.ReplaceAllString(l, "")
		out[i] = cut(strings.TrimRight(l, " \t"))
	}
	return out
}

// cut shortens s to at most MaxLine bytes, on a rune boundary.
func cut(s string) string {
	if len(s) <= MaxLine {
		return s
	}
	n := MaxLine
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n]
}

func utf8Start(b byte) bool { return b&0xc0 != 0x80 }

// classify is the kind of report a line starts, or "".
func classify(l string) Kind {
	switch {
	case strings.HasPrefix(l, "BUG: KASAN: "):
		return KASAN
	case strings.HasPrefix(l, "UBSAN: "):
		return UBSAN
	case strings.Contains(l, "BUG: soft lockup - CPU#"):
		return SoftLockup
	case strings.Contains(l, "Watchdog detected hard LOCKUP on cpu"):
		return HardLockup
	case strings.HasPrefix(l, "INFO: task ") && strings.Contains(l, " blocked for more than "):
		return HungTask
	case strings.HasPrefix(l, "kernel BUG at "):
		return Bug
	case strings.HasPrefix(l, "WARNING: CPU: "), strings.HasPrefix(l, "WARNING: at "):
		return Warning
	case strings.HasPrefix(l, "general protection fault"):
		return GPF
	case strings.HasPrefix(l, "BUG: kernel NULL pointer dereference"), strings.HasPrefix(l, "BUG: unable to handle"):
		return Oops
	case strings.HasPrefix(l, "BUG: "):
		return Bug
	case oopsHeader.MatchString(l):
		return Oops
	case strings.HasPrefix(l, panicPrefix):
		return Panic
	}
	return ""
}

// rip is the symbol and offset of the first RIP line before the call
// trace (the line's text when it names none: a user-space address). A
// RIP inside the trace is an exception frame's, often user space's
// syscall, not where the kernel faulted.
func rip(lines []string) string {
	for _, l := range lines {
		if strings.TrimSpace(l) == "Call Trace:" {
			return ""
		}
		m := ripLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if syms := symbol.FindAllString(m[1], -1); len(syms) > 0 {
			return syms[len(syms)-1]
		}
		return strings.TrimSpace(m[1])
	}
	return ""
}

// trace is the first call trace's reliable frames, at most MaxTrace.
func trace(lines []string) []string {
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "Call Trace:" {
			at = i + 1
			break
		}
	}
	if at < 0 {
		return nil
	}
	var out []string
	for _, l := range lines[at:min(len(lines), at+maxTraceScan)] {
		t := strings.TrimSpace(l)
		if endsTrace(t) {
			break
		}
		if !frame.MatchString(t) || strings.HasPrefix(t, "? ") {
			continue // a marker (<IRQ>, <TASK>), an exception frame's registers, an unreliable frame
		}
		out = append(out, t)
		if len(out) == MaxTrace {
			break
		}
	}
	return out
}

// endsTrace reports whether a line ends a call trace.
func endsTrace(t string) bool {
	return t == "</TASK>" || t == "" || strings.HasPrefix(t, "---[ end") || strings.HasPrefix(t, panicPrefix) ||
		strings.HasPrefix(t, "Modules linked in:") || strings.HasPrefix(t, "Kernel Offset:") || t == "Call Trace:"
}

// panicMessage is the first panic line's message, or "".
func panicMessage(lines []string) string {
	for _, l := range lines {
		if m, ok := strings.CutPrefix(l, panicPrefix); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// text is the report's lines to the panic's end marker, bounded.
func text(lines []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i == MaxTextLines || b.Len()+len(l)+1 > MaxText {
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
		if strings.HasPrefix(l, "---[ end Kernel panic") {
			break
		}
	}
	return b.String()
}

// Summary is the report in one line: its first line, and the RIP and the
// panic's message where they say more.
func (r *Report) Summary() string {
	s := r.Title
	if r.RIP != "" && !strings.Contains(s, r.RIP) {
		s += " (RIP " + r.RIP + ")"
	}
	if r.Panic != "" && !strings.Contains(s, r.Panic) {
		s += "; panic: " + r.Panic
	}
	return s
}

// numbers are what differs between two reports of one fault: addresses,
// CPU and PID numbers, times.
var numbers = regexp.MustCompile(`(0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*`)

// Signature is what makes two reports most likely one fault: the kind and
// where it happened (the RIP's symbol without offset, else the first
// line with its numbers masked).
func (r *Report) Signature() string {
	where := r.RIP
	if s := symbol.FindString(where); s != "" {
		name, _, _ := strings.Cut(s, "+")
		if _, mod, ok := strings.Cut(s, " ["); ok {
			name += " [" + mod
		}
		where = name
	} else {
		where = numbers.ReplaceAllString(r.Title, "N")
	}
	return string(r.Kind) + "|" + where
}
