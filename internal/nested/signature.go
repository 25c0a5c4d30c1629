package nested

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// Signature is the emulated host's own failure, recognised in its console
// or a test's output (docs/kvm.md, "What is retried"). Only an attempt that
// ends with one is retried; any other failure is ours.
type Signature int

// Signatures, from the emulated host's kernel first.
const (
	// None: no emulator signature; a failure is the code's under test.
	None Signature = iota
	// SoftLockup: "watchdog: BUG: soft lockup - CPU#1 stuck for 331s! [kvm.test:212]"
	// on the emulated host's console.
	SoftLockup
	// RCUStall: "rcu: INFO: rcu_sched self-detected stall on CPU" or
	// "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:" there.
	RCUStall
	// HostDied: "Kernel panic - not syncing" there, or (set by the runner,
	// not by Classify) QEMU exited by itself before the plan was done.
	HostDied
	// TripleFaultBeforeReady: a guest of the test triple-faulted before its
	// agent printed the ready line ("during boot: kvm: vcpu exit SHUTDOWN
	// at RIP 0xfff0: triple fault"; SVM resets the VMCB, hence the RIP).
	TripleFaultBeforeReady
	// SilentBoot: a guest's boot timed out with nothing at all on its
	// console (no ready line, "(no console output)").
	SilentBoot
	// HostStalled (set by the runner's Watcher.Stalled, not by Classify):
	// a step outlived its own timeout, which the init enforces by the
	// emulated host's clock, with the console silent: the host's own time
	// stopped (its timer interrupts no longer taken, as with one vCPU).
	HostStalled
	// StalledBoot: a guest's boot timed out with its console tail all the
	// kernel's own boot messages, none a panic, Oops, BUG or WARNING: the
	// guest stopped before its init printed a line (seen at "Failed to
	// access perfctr msr", where the same boot triple-faults at other
	// times). A boot that panicked, or whose init printed, is ours.
	StalledBoot
)

var signatureNames = [...]string{"none", "soft-lockup", "rcu-stall", "host-died", "triple-fault-before-ready", "silent-boot", "host-stalled", "stalled-boot"}

func (s Signature) String() string {
	if s < 0 || int(s) >= len(signatureNames) {
		return fmt.Sprintf("signature(%d)", int(s))
	}
	return signatureNames[s]
}

// MarshalText implements encoding.TextMarshaler (the report names signatures).
func (s Signature) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Signature) UnmarshalText(b []byte) error {
	for i, n := range signatureNames {
		if n == string(b) {
			*s = Signature(i)
			return nil
		}
	}
	return fmt.Errorf("nested: unknown signature %q", b)
}

// hostSignatures are the emulated host's kernel messages (printk formats:
// kernel/watchdog.c, kernel/rcu/tree_stall.h, kernel/panic.c), matched
// anywhere in a console line after an optional printk timestamp.
var hostSignatures = []struct {
	sig Signature
	re  *regexp.Regexp
}{
	{SoftLockup, regexp.MustCompile(`watchdog: BUG: soft lockup - CPU#\d+ stuck for \d+s!`)},
	{RCUStall, regexp.MustCompile(`(?:rcu: )?INFO: rcu_\w+ (?:self-detected stall on CPU|detected (?:expedited )?stalls on CPUs/tasks)`)},
	{HostDied, regexp.MustCompile(`Kernel panic - not syncing`)},
}

// HostLine says whether one line of the emulated host's console is one of
// its kernel's signatures. Lines that start with white space are quoted
// output (a step's echoed test log, a guest's console tail in an error),
// never the host kernel's own: a guest's panic is not the host's.
func HostLine(line []byte) Signature {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
		return None
	}
	for _, h := range hostSignatures {
		if h.re.Match(line) {
			return h.sig
		}
	}
	return None
}

// tripleFaultBeforeReady is a guest's triple fault while it booted: the
// KVM backend's waitReady wraps the vCPU's SHUTDOWN exit in "during boot".
// A triple fault after the agent was ready may be a bad restore (guest
// page tables put back wrong), so it is not a signature.
var tripleFaultBeforeReady = regexp.MustCompile(`during boot: kvm: vcpu exit SHUTDOWN at RIP 0x[0-9a-f]+: triple fault`)

// silentBootReady and silentBootNothing: the KVM backend's boot timeout
// (no ready line) followed by its empty console tail. A boot that printed
// anything and then stopped is not this.
const (
	silentBootReady   = `no "themis-agent: ready" on the console`
	silentBootNothing = "(no console output)"
)

// Classify returns the emulator signature an attempt ended with: the
// emulated host kernel's messages in consoleTail (the console while the
// attempt ran), then a guest's triple fault before ready or a silent boot
// in testOutput (the attempt's stdout and stderr). None when there is none.
func Classify(consoleTail, testOutput []byte) Signature {
	sig, _ := Evidence(consoleTail, testOutput)
	return sig
}

// Evidence is Classify with the line that shows the signature.
func Evidence(consoleTail, testOutput []byte) (Signature, string) {
	for _, line := range bytes.Split(consoleTail, []byte("\n")) {
		if sig := HostLine(line); sig != None {
			return sig, strings.TrimSpace(string(line))
		}
	}
	if loc := tripleFaultBeforeReady.FindIndex(testOutput); loc != nil {
		return TripleFaultBeforeReady, string(testOutput[loc[0]:loc[1]])
	}
	i := bytes.Index(testOutput, []byte(silentBootReady))
	if i < 0 {
		return None, ""
	}
	if bytes.Contains(testOutput[i:], []byte(silentBootNothing)) {
		return SilentBoot, silentBootReady + " ... " + silentBootNothing
	}
	if last, ok := kernelOnlyTail(testOutput[i:]); ok {
		return StalledBoot, silentBootReady + " ... " + last
	}
	return None, ""
}

// printkLine is a kernel message on a guest's console, "[   1.268000] ...".
var printkLine = regexp.MustCompile(`^\[\s*\d+\.\d+\] `)

// guestTrouble marks a console line where the guest kernel itself went
// wrong: then the stop is the guest's (or ours), not the emulator's.
var guestTrouble = regexp.MustCompile(`Kernel panic|Oops|BUG:|WARNING:|Call Trace|general protection`)

// kernelOnlyTail reads the console tail that follows a boot timeout (the
// indented lines after "console:") and says whether every line of it is a
// kernel message and none shows the guest in trouble; it returns the last.
func kernelOnlyTail(out []byte) (string, bool) {
	j := bytes.Index(out, []byte("console:\n"))
	if j < 0 {
		return "", false
	}
	var last string
	for _, l := range strings.Split(string(out[j+len("console:\n"):]), "\n") {
		if l == "" || (l[0] != ' ' && l[0] != '\t') {
			break
		}
		l = strings.TrimSpace(l)
		if !printkLine.MatchString(l) || guestTrouble.MatchString(l) {
			return "", false
		}
		last = l
	}
	return last, last != ""
}
