package repro

import (
	_ "embed"
	"text/template"
)

// setup.sh.tmpl defines "setup", the part of repro.sh a kernel finding's
// repro.sh shares: the root check, the tools, the lanes made and mounted,
// remount_all.
//
//go:embed setup.sh.tmpl
var setupTemplate string

func init() {
	template.Must(templates.New("setup.sh").Parse(setupTemplate))
}
