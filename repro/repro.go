package repro

import (
	"bytes"
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"text/template"

	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/oracle"
)

// Finding kinds a reproducer checks: lanes that disagree on the last op's
// errno, or on the state they leave.
const (
	KindErrno = "errno-divergence"
	KindState = "state-divergence"
)

// Finding is what a reproducer needs of a stored finding.
type Finding struct {
	ID, Kind, Detail string
	// Path and Field are the first differing path and field ("" unknown).
	Path, Field string
	// Trace is the (minimized) trace in opspec short form.
	Trace []string
	// Revert is how the run went back between states: "remount" runs
	// each op on freshly mounted lanes.
	Revert string
}

// Lane is one lane of the reproducer.
type Lane struct {
	Spec         string // the lane spec as the run had it
	FS           string
	SizeMiB      int
	MountOptions string
	Package      string // the Debian package of its mkfs
	Mkfs         baseimage.Command
}

// Input is everything Generate writes from.
type Input struct {
	Finding Finding
	Lanes   []Lane
	// Policy is the canonicalization the state listing applies (the
	// run's; auto's for its lanes unless told).
	Policy oracle.Policy
	// Kernel is the guest kernel the finding was made on, as far as
	// known; Version is Themis's.
	Kernel, Version string
}

//go:embed repro.c.tmpl
var cTemplate string

//go:embed repro.sh.tmpl
var shTemplate string

//go:embed README.tmpl
var readmeTemplate string

var templates = template.Must(template.New("repro.c").Funcs(template.FuncMap{"b2i": b2i, "shq": shellQuote}).Parse(cTemplate))

func init() {
	template.Must(templates.New("repro.sh").Parse(shTemplate))
	template.Must(templates.New("README").Parse(readmeTemplate))
}

// step is one trace op in the templates.
type step struct {
	Short, Quoted, Body string
}

// lane is a Lane in the templates.
type lane struct {
	Lane
	Name  string   // shell- and C-safe: lane<i>-<spec>
	Shell string   // the mkfs command line, quoted for sh
	After []string // the after-commands, quoted for sh
}

// view is the templates' data.
type view struct {
	Finding
	ID, Kind, Detail, Expected string
	Steps                      []step
	Lanes                      []lane
	P                          oracle.Policy
	Policy, Kernel, Version    string
	Remount, WantErrno         bool
}

// Files are the reproducer's files: name → contents (repro.sh is meant to
// be executable).
type Files map[string][]byte

// Generate writes the reproducer of in: repro.c, repro.sh and README. It
// refuses a finding of another kind than errno or state divergence, fewer
// than two lanes, and trace ops a host reproducer must not run (setting
// the clock, mounting, running programs).
func Generate(in Input) (Files, error) {
	f := in.Finding
	if f.Kind != KindErrno && f.Kind != KindState {
		return nil, fmt.Errorf("repro: finding %s is a %s: only %s and %s findings export", f.ID, f.Kind, KindErrno, KindState)
	}
	if len(in.Lanes) < 2 {
		return nil, fmt.Errorf("repro: finding %s has %d lanes: a differential reproducer needs two or more", f.ID, len(in.Lanes))
	}
	v := view{Finding: f, ID: f.ID, Kind: f.Kind, Detail: f.Detail, Expected: expected(f), P: in.Policy,
		Policy: in.Policy.String(), Kernel: orUnknown(in.Kernel), Version: orUnknown(in.Version),
		Remount: f.Revert == "remount", WantErrno: f.Kind == KindErrno}
	if v.Finding.Revert == "" {
		v.Finding.Revert = "unknown (taken as machine: the ops run back to back)"
	}
	for _, s := range f.Trace {
		body, err := cStep(s)
		if err != nil {
			return nil, err
		}
		v.Steps = append(v.Steps, step{Short: cComment(s), Quoted: cStr(s), Body: body})
	}
	for i, l := range in.Lanes {
		v.Lanes = append(v.Lanes, lane{Lane: l, Name: laneName(i, l.Spec), Shell: shellCommand(l.Mkfs), After: afterCommands(l.Mkfs)})
	}
	out := Files{}
	for _, name := range []string{"repro.c", "repro.sh", "README"} {
		var b bytes.Buffer
		if err := templates.ExecuteTemplate(&b, name, v); err != nil {
			return nil, fmt.Errorf("repro: %s: %w", name, err)
		}
		out[name] = b.Bytes()
	}
	return out, nil
}

// expected is the finding's divergence in one line.
func expected(f Finding) string {
	d := strings.Join(strings.Fields(f.Detail), " ")
	if d == "" {
		d = "(no detail stored)"
	}
	return f.Kind + ": " + d
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.=+-]`)

// laneName is a lane's name in file names, the C program's output and
// shell words.
func laneName(i int, spec string) string {
	return fmt.Sprintf("lane%d-%s", i, unsafeName.ReplaceAllString(spec, "_"))
}

// cComment makes s safe inside a C block comment.
func cComment(s string) string { return strings.ReplaceAll(s, "*/", "* /") }

// shellCommand is c's mkfs command line for sh (env additions first).
func shellCommand(c baseimage.Command) string {
	var w []string
	if len(c.Env) > 0 {
		w = append(w, "env")
		for _, kv := range c.Env {
			w = append(w, shellQuote(kv))
		}
	}
	w = append(w, shellQuote(c.Tool))
	for _, a := range c.Args {
		w = append(w, shellQuote(a))
	}
	return strings.Join(w, " ")
}

func afterCommands(c baseimage.Command) []string {
	var out []string
	for _, argv := range c.After {
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = shellQuote(a)
		}
		out = append(out, strings.Join(q, " "))
	}
	return out
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:=,+@%-]+$`)

// shellQuote is s as one sh word: as it is when it needs no quoting, else
// in single quotes.
func shellQuote(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
