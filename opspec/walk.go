package opspec

import (
	"fmt"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// WalkUsage lists the read-side commands a profile runs besides ops.
const WalkUsage = `ls [DIR]      lstat of DIR's entries, as ls -l DIR
find [DIR]    lstat of everything under DIR, as find DIR -ls
(DIR is lane-relative; omitted, "/" or "." is the lane root)`

// ParseWalk reads a read-side command, "ls [DIR]" or "find [DIR]", into an
// agent Walk (lane left empty; the session fills it per lane). A leading or
// trailing "/" is dropped, and "/", "." or no DIR is the lane root. ok is
// false, with a nil error, when s is neither command (it may be an op for
// Parse); err is a malformed ls or find.
func ParseWalk(s string) (w *agentv1.Walk, ok bool, err error) {
	f := strings.Fields(s)
	if len(f) == 0 || (f[0] != "ls" && f[0] != "find") {
		return nil, false, nil
	}
	if len(f) > 2 {
		return nil, true, fmt.Errorf("opspec: %s: want at most 1 argument (a directory), got %d\nusage:\n%s", f[0], len(f)-1, WalkUsage)
	}
	p := ""
	if len(f) == 2 {
		p = strings.Trim(f[1], "/")
		if p == "." {
			p = ""
		}
	}
	return &agentv1.Walk{Path: p, Recursive: f[0] == "find"}, true, nil
}

// FormatWalk writes w in ParseWalk's canonical form: "ls d", "find /" (the
// lane root). Bounds are not part of the short form.
func FormatWalk(w *agentv1.Walk) string {
	name, p := "ls", w.GetPath()
	if w.GetRecursive() {
		name = "find"
	}
	if p == "" {
		p = "/"
	}
	return name + " " + p
}
