package repro

import (
	_ "embed"
	"fmt"
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

var crashTemplates = template.Must(template.New("check.sh").Funcs(template.FuncMap{"join": shellJoin}).Parse(crashShTemplate))

func init() {
	template.Must(crashTemplates.New("README").Parse(crashReadmeTemplate))
}

// CrashFiles writes check.sh, README and trace.txt of a crash finding.
func CrashFiles(c Crash) (Files, error) {
	if len(c.Check) == 0 {
		return nil, fmt.Errorf("repro: crash finding %s: no checker command", c.ID)
	}
	files := Files{"trace.txt": []byte(strings.Join(c.Trace, "\n") + "\n")}
	for _, name := range []string{"check.sh", "README"} {
		var b strings.Builder
		if err := crashTemplates.ExecuteTemplate(&b, name, c); err != nil {
			return nil, fmt.Errorf("repro: %s: %w", name, err)
		}
		files[name] = []byte(b.String())
	}
	return files, nil
}

// shellJoin quotes each word for the shell.
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}
