package repro

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"text/template"

	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/opspec"
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
	// Kernel is a kernel finding's report (KindKernel; nil otherwise).
	Kernel *KernelReport
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
	// Image is the patched image the finding was found on (nil: a stock
	// kernel's).
	Image *Image
}

//go:embed repro.c.tmpl
var cTemplate string

//go:embed repro.sh.tmpl
var shTemplate string

//go:embed README.tmpl
var readmeTemplate string

var templates = template.Must(template.New("repro.c").Funcs(escapers).Funcs(template.FuncMap{"b2i": b2i}).Parse(cTemplate))

func init() {
	template.Must(templates.New("repro.sh").Parse(shTemplate))
	template.Must(templates.New("README").Parse(readmeTemplate))
}

// step is one trace op in the templates.
type step struct {
	Short text   // the op in opspec short form
	Body  string // its C code (cStep)
	// Fresh: under the remount revert the lanes are remounted before it
	// (every op but the first and those that share the mount of the op
	// before: explore.SharesMount).
	Fresh bool
	// Walk: the lanes are walked before it (and before the remount), as
	// the run's fingerprint of the state before walked them
	// (explore.WalkedBefore).
	Walk bool
}

// lane is a Lane in the templates.
type lane struct {
	Spec, FS, Tool, Package text
	SizeMiB                 int
	// MountOptions are the lane's ("" none), Mount mount -o's argument
	// (loop and those).
	MountOptions, Mount text
	GoOnly              text
	Name                string   // lane<i>-<spec>, of [A-Za-z0-9_.=+-] only
	Shell               string   // the mkfs command line, quoted for sh
	After               []string // the after-commands, quoted for sh
}

// view is the templates' data: every string from the finding, its lanes or
// the host is a text, which prints only through an escaper.
type view struct {
	ID, Kind, Detail, Expected, Path, Field, Revert text
	Steps                                           []step
	Lanes                                           []lane
	P                                               oracle.Policy
	Policy, Kernel, Version                         text
	Remount, WantErrno                              bool
	Image                                           *imageView
}

// Files are the reproducer's files: name → contents (repro.sh is meant to
// be executable).
type Files map[string][]byte

// Generate writes the reproducer of in: repro.c, repro.sh and README. It
// refuses a finding of another kind than errno or state divergence or
// kernel, fewer than two lanes (a kernel finding: none), and trace ops a
// host reproducer must not run (setting the clock, mounting, running
// programs). A kernel finding's repro.sh and README say that it crashes
// the kernel and must run in a VM (kernelFiles). Every string it writes
// is quoted for where it lands (shell word or comment, C string or
// comment, text).
func Generate(in Input) (Files, error) {
	f := in.Finding
	if f.Kind != KindErrno && f.Kind != KindState && f.Kind != KindKernel {
		return nil, fmt.Errorf("repro: finding %q is a %q: only %s, %s and %s findings export", f.ID, f.Kind, KindErrno, KindState, KindKernel)
	}
	if f.Kind == KindKernel && len(in.Lanes) == 0 {
		return nil, fmt.Errorf("repro: kernel finding %q has no lanes", f.ID)
	}
	if len(in.Lanes) < 2 && f.Kind != KindKernel {
		return nil, fmt.Errorf("repro: finding %q has %d lanes: a differential reproducer needs two or more", f.ID, len(in.Lanes))
	}
	v := view{ID: text(f.ID), Kind: text(f.Kind), Detail: text(f.Detail), Expected: text(expected(f)), Path: text(f.Path), Field: text(f.Field),
		Revert: text(f.Revert), P: in.Policy, Policy: text(in.Policy.String()), Kernel: text(orUnknown(in.Kernel)), Version: text(orUnknown(in.Version)),
		Remount: f.Revert == "remount", WantErrno: f.Kind == KindErrno, Image: viewOfImage(in.Image)}
	if f.Revert == "" {
		v.Revert = "unknown (taken as machine: the ops run back to back)"
	}
	for i, s := range f.Trace {
		body, err := cStep(s)
		if err != nil {
			return nil, err
		}
		fresh, walk, err := between(i, s)
		if err != nil {
			return nil, err
		}
		v.Steps = append(v.Steps, step{Short: text(s), Body: body, Fresh: fresh, Walk: walk})
	}
	for i, l := range in.Lanes {
		mount := "loop"
		if l.MountOptions != "" {
			mount += "," + l.MountOptions
		}
		v.Lanes = append(v.Lanes, lane{Spec: text(l.Spec), FS: text(l.FS), Tool: text(l.Mkfs.Tool), Package: text(l.Package), SizeMiB: l.SizeMiB,
			MountOptions: text(l.MountOptions), Mount: text(mount), GoOnly: text(l.Mkfs.GoOnly),
			Name: laneName(i, l.Spec), Shell: shellCommand(l.Mkfs), After: afterCommands(l.Mkfs)})
	}
	if f.Kind == KindKernel {
		return kernelFiles(v, f.Kernel)
	}
	out := Files{}
	for _, name := range []string{"repro.c", "repro.sh", "README"} {
		b, err := render(templates, name, v)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

// between says what the lanes get before trace op i, s: a walk of every
// lane (walk: explore.WalkedBefore, the run's fingerprint of the state
// before), then, under the remount revert, a remount (fresh: before every
// op but the first and those that share the mount of the op before,
// explore.SharesMount).
func between(i int, s string) (fresh, walk bool, err error) {
	req, err := opspec.ParseRequest(s)
	if err != nil {
		return false, false, fmt.Errorf("repro: trace op %q: %w", s, err)
	}
	return i > 0 && !explore.SharesMount(req), explore.WalkedBefore(i), nil
}

// freshBefore says whether f's lanes are walked, and remounted (under the
// remount revert), before its trace op i, as between says.
func freshBefore(f Finding, i int) (fresh, walk bool, err error) {
	fresh, walk, err = between(i, f.Trace[i])
	return fresh && f.Revert == "remount", walk, err
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
	w[0] = commandWord(w[0])
	return strings.Join(w, " ")
}

func afterCommands(c baseimage.Command) []string {
	var out []string
	for _, argv := range c.After {
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = shellQuote(a)
		}
		if len(q) > 0 {
			q[0] = commandWord(q[0])
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

// commandWord is a quoted word in a command's first place: in single
// quotes if it holds '=', which unquoted would make it an assignment.
func commandWord(q string) string {
	if strings.Contains(q, "=") && !strings.HasPrefix(q, "'") {
		return "'" + q + "'"
	}
	return q
}
