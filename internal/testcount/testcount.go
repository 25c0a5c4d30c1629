package testcount

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
)

// event is one line of `go test -json` (test2json) output.
type event struct {
	Action  string
	Package string
	Test    string
}

// Result counts the matching tests by outcome; names are "pkg.Test/sub".
type Result struct {
	Passed, Failed, Skipped []string
}

// Ran is the number of matching tests that ran (passed or failed).
func (r Result) Ran() int { return len(r.Passed) + len(r.Failed) }

// maxLine bounds one JSON line (test output lines are short; a huge one is
// an error, not a reason to buffer without limit).
const maxLine = 4 << 20

// Count reads test2json events from r and counts the tests whose name
// matches pattern. Lines that are not JSON (build output) are ignored.
func Count(r io.Reader, pattern *regexp.Regexp) (Result, error) {
	var res Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Test == "" || !pattern.MatchString(e.Test) {
			continue
		}
		name := e.Package + "." + e.Test
		switch e.Action {
		case "pass":
			res.Passed = append(res.Passed, name)
		case "fail":
			res.Failed = append(res.Failed, name)
		case "skip":
			res.Skipped = append(res.Skipped, name)
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("testcount: read go test -json output: %w", err)
	}
	for _, l := range [][]string{res.Passed, res.Failed, res.Skipped} {
		sort.Strings(l)
	}
	return res, nil
}

// Check returns an error unless at least min matching tests ran and none failed.
func (r Result) Check(min int) error {
	switch {
	case len(r.Failed) > 0:
		return fmt.Errorf("testcount: %d matching tests failed: %v", len(r.Failed), r.Failed)
	case r.Ran() < min:
		return fmt.Errorf("testcount: %d matching tests ran (%d skipped), want at least %d", r.Ran(), len(r.Skipped), min)
	}
	return nil
}
