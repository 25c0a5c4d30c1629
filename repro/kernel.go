package repro

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// KindKernel is a kernel finding's kind: the guest's kernel crashed (or
// reported a fault) running the trace's last op.
const KindKernel = "kernel"

// KernelReport is a kernel finding's report (internal/kreport's), as its
// reproducer prints it.
type KernelReport struct {
	// Kind is kreport's ("oops", "bug", "warning", "panic", ...), Title
	// the report's first line, RIP where the CPU was ("" none), Panic the
	// panic's message ("" none).
	Kind, Title, RIP, Panic string
	// Trace is the call trace's functions, innermost first.
	Trace []string
	// Text is the report's lines as the console printed them.
	Text string
}

//go:embed kernel-repro.sh.tmpl
var kernelShTemplate string

//go:embed kernel-README.tmpl
var kernelReadmeTemplate string

func init() {
	template.Must(templates.New("kernel-repro.sh").Parse(kernelShTemplate))
	template.Must(templates.New("kernel-README").Parse(kernelReadmeTemplate))
}

// reportView is a KernelReport in the templates, Text cut into its lines.
type reportView struct {
	Kind, Title, RIP, Panic text
	Trace, Text             []text
}

// kernelView is a kernel finding's template data: Generate's, and the
// report.
type kernelView struct {
	view
	Report reportView
}

// kernelFiles writes a kernel finding's reproducer from Generate's view
// v: repro.c as for any finding; repro.sh, which runs only with --in-vm
// and says why, runs the trace on every lane and looks for a fault report
// in the kernel log; README, which says plainly that it crashes the
// kernel and must run in a VM, with the report (first line, RIP, panic,
// call trace, text).
func kernelFiles(v view, r *KernelReport) (Files, error) {
	if r == nil || r.Title == "" {
		return nil, fmt.Errorf("repro: kernel finding %q: no kernel report", string(v.ID))
	}
	rv := reportView{Kind: text(r.Kind), Title: text(r.Title), RIP: text(r.RIP), Panic: text(r.Panic), Trace: texts(r.Trace)}
	if r.Text != "" {
		rv.Text = texts(strings.Split(r.Text, "\n"))
	}
	kv := kernelView{view: v, Report: rv}
	out := Files{}
	for name, tmpl := range map[string]string{"repro.c": "repro.c", "repro.sh": "kernel-repro.sh", "README": "kernel-README"} {
		b, err := render(templates, tmpl, kv)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}
