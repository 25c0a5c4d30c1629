package nested

import "fmt"

// MaxAttempts bounds the attempts of one test: each after the first
// follows an attempt that ended with an emulator signature.
const MaxAttempts = 3

// Attempt is how one run of one test (or job step) ended.
type Attempt struct {
	Boot      int       `json:"boot"` // which boot of the emulated host, from 1
	Passed    bool      `json:"passed"`
	Signature Signature `json:"signature"`        // None when it passed or failed by our code
	Detail    string    `json:"detail,omitempty"` // the evidence line, or why it failed
	Seconds   float64   `json:"seconds"`
}

// Verdict is what a test's attempts decide.
type Verdict int

// Verdicts.
const (
	// Retry: no verdict yet; run it again.
	Retry Verdict = iota
	// Pass: an attempt passed (every earlier one ended with a signature).
	Pass
	// Fail: an attempt failed without a signature, or a must-pass test
	// ended every allowed attempt with one. Fails the job.
	Fail
	// Inconclusive: every allowed attempt of a test outside the must-pass
	// core ended with a signature. Reported; does not fail the job.
	Inconclusive
)

var verdictNames = [...]string{"retry", "pass", "fail", "inconclusive"}

func (v Verdict) String() string {
	if v < 0 || int(v) >= len(verdictNames) {
		return fmt.Sprintf("verdict(%d)", int(v))
	}
	return verdictNames[v]
}

// MarshalText implements encoding.TextMarshaler.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// Decide returns the verdict on a test's attempts so far, in order. The
// first attempt that passed, or that failed without a signature, decides;
// a signature asks for another attempt, up to MaxAttempts; after that a
// must-pass test fails and any other is inconclusive.
func Decide(attempts []Attempt, mustPass bool) Verdict {
	for _, a := range attempts {
		switch {
		case a.Passed:
			return Pass
		case a.Signature == None:
			return Fail
		}
	}
	switch {
	case len(attempts) < MaxAttempts:
		return Retry
	case mustPass:
		return Fail
	default:
		return Inconclusive
	}
}
