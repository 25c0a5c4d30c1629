package repro

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"text/template"
)

// Crash is what a crash finding's reproducer needs: the finding, its
// lane, the state kept and how the host checks it. The image itself is
// written by the caller (crash.img).
type Crash struct {
	ID, Detail string
	Spec, FS   string
	// MountOptions are the lane's (check.sh --mount uses them).
	MountOptions string
	Setup        []string
	SetupSync    bool
	Trace        []string
	// State describes the crash state ("after 1 flush(es), prefix: ..."),
	// Keep and InFlight its write-log entries.
	State, Keep, InFlight string
	Writes, LogFlushes    int
	States, NotClean      int
	Verdict, Durability   string
	Output                string
	// Check and Recover are the host checker's and its journal replay's
	// command lines before the image path (Recover nil: none); Package is
	// the checker's Debian package.
	Check, Recover []string
	Package        string
	Version        string
}

//go:embed crash.sh.tmpl
var crashShTemplate string

//go:embed crash-README.tmpl
var crashReadmeTemplate string

var crashTemplates = template.Must(template.New("check.sh").Funcs(escapers).Parse(crashShTemplate))

func init() {
	template.Must(crashTemplates.New("README").Parse(crashReadmeTemplate))
}

// crashView is a Crash in the templates: every string a text, which prints
// only through an escaper.
type crashView struct {
	ID, Detail, Spec, FS, MountOptions, Mount text
	Setup, Trace                              []text
	SetupSync                                 bool
	State, Keep, InFlight                     text
	Writes, LogFlushes, States, NotClean      int
	Verdict, Durability, Output               text
	Check, Recover                            []text
	Package, Version                          text
}

// CrashFiles writes check.sh, README and trace.txt of a crash finding,
// every string quoted for where it lands. It refuses a trace or setup op
// of more than one line (trace.txt has one op a line).
func CrashFiles(c Crash) (Files, error) {
	if len(c.Check) == 0 {
		return nil, fmt.Errorf("repro: crash finding %q: no checker command", c.ID)
	}
	for _, op := range append(slices.Clone(c.Setup), c.Trace...) {
		if strings.ContainsAny(op, "\r\n") {
			return nil, fmt.Errorf("repro: crash finding %q: op %q is more than one line", c.ID, op)
		}
	}
	mount := "loop"
	if c.MountOptions != "" {
		mount += "," + c.MountOptions
	}
	v := crashView{ID: text(c.ID), Detail: text(c.Detail), Spec: text(c.Spec), FS: text(c.FS), MountOptions: text(c.MountOptions), Mount: text(mount),
		Setup: texts(c.Setup), Trace: texts(c.Trace), SetupSync: c.SetupSync, State: text(c.State), Keep: text(c.Keep), InFlight: text(c.InFlight),
		Writes: c.Writes, LogFlushes: c.LogFlushes, States: c.States, NotClean: c.NotClean,
		Verdict: text(c.Verdict), Durability: text(c.Durability), Output: text(c.Output),
		Check: texts(c.Check), Recover: texts(c.Recover), Package: text(c.Package), Version: text(c.Version)}
	files := Files{"trace.txt": []byte(strings.Join(c.Trace, "\n") + "\n")}
	for _, name := range []string{"check.sh", "README"} {
		b, err := render(crashTemplates, name, v)
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	return files, nil
}
