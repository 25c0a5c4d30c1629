package bugs

import (
	"slices"
	"strings"
	"time"
)

// FindingKey is what tells a finding of a check from another across runs:
// its kind and signature (explore.Finding.Signature).
func FindingKey(kind, signature string) string { return "finding|" + kind + "|" + signature }

// anyKey ends a baseline key that stands for every key it prefixes.
const anyKey = "*"

// FindingKindKey is a baseline key for every finding of kind, whatever
// its signature: a finding of the state, such as seek-answer, whose
// signature names the check's place in the run and the op before it,
// which vary from part to part.
func FindingKindKey(kind string) string { return FindingKey(kind, anyKey) }

// InBaseline reports whether key is one of baseline's keys, or one a
// FindingKindKey of baseline stands for.
func InBaseline(baseline []string, key string) bool {
	for _, b := range baseline {
		if b == key {
			return true
		}
		if prefix, ok := strings.CutSuffix(b, anyKey); ok && strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

// CellKey is a clock cell against its rule, across runs: the lane's
// filesystem, op, field and verdict kind (the verdict without its detail:
// the values a diverged cell shows vary from run to run).
func CellKey(fs, op, field, verdict string) string {
	kind, _, _ := strings.Cut(verdict, "(")
	return "clock|" + fs + "|" + op + "|" + field + "|" + kind
}

// Outcome is what bench bugs saw of one case.
type Outcome struct {
	Case Case
	// Detected: the patched image's check found something outside the
	// stock baseline; First is the time from the check's start to it,
	// FirstKey, FirstPart and FirstDetail what it was.
	Detected    bool
	First       time.Duration
	FirstKey    string
	FirstPart   string
	FirstDetail string
	// StockClean: the detection's key is in the stock baseline, but the
	// stock image does not show the finding itself (its trace run there
	// keeps what was made durable); it says what the stock image showed.
	StockClean string
	// Findings counts the patched check's findings and cells, InBaseline
	// those whose key the stock baseline holds.
	Findings   int
	InBaseline int
	// States adds up the explore parts' states; Elapsed is the check's
	// wall time.
	States  int64
	Elapsed time.Duration
	// Reproduced: the detection showed again in a fresh session on the
	// patched image: a finding's trace replayed (themisctl replay), a
	// clock cell in a clock part run again. Repro says what the replay
	// showed, or why it could not replay the detection.
	Reproduced bool
	Repro      string
	// Err is how the case could not be run or checked ("" it was).
	Err string
	// Explore is plain explore's detection of the case, side by side
	// (bench bugs --versus explore; nil without).
	Explore *Detection
}

// Detection is whether another command than check detected a case: its
// first finding outside that command's own stock baseline, and when.
type Detection struct {
	Command    string
	Detected   bool
	First      time.Duration
	FirstKey   string
	Findings   int
	InBaseline int
	// States and Elapsed are how far the command went: the states it
	// explored and its time, to its end or its first detection.
	States  int64
	Elapsed time.Duration
	Err     string
}

// ClassMedian is the median time to detect of the detected cases of one
// class.
type ClassMedian struct {
	Class    string
	Cases    int
	Detected int
	Median   time.Duration
}

// Medians are the per-class detection counts and median times to detect,
// in Classes order (classes without cases left out), and the whole
// corpus's last (Class "all").
func Medians(out []Outcome) []ClassMedian {
	var res []ClassMedian
	for _, class := range append(slices.Clone(Classes), "all") {
		m := ClassMedian{Class: class}
		var times []time.Duration
		for _, o := range out {
			if class != "all" && o.Case.Class != class {
				continue
			}
			m.Cases++
			if o.Detected {
				m.Detected++
				times = append(times, o.First)
			}
		}
		if m.Cases == 0 {
			continue
		}
		m.Median = median(times)
		res = append(res, m)
	}
	return res
}

func median(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
