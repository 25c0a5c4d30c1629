package repro

import (
	_ "embed"
	"text/template"
)

// Templates a kernel finding's files share with the others':
// setup.sh.tmpl defines "setup", the part of repro.sh from the root check
// to remount_all (the tools, the lanes made and mounted);
// image-README.tmpl defines "image-readme", the README's section on the
// patched image a finding was found on.
var (
	//go:embed setup.sh.tmpl
	setupTemplate string
	//go:embed image-README.tmpl
	imageReadmeTemplate string
)

func init() {
	template.Must(templates.New("setup.sh").Parse(setupTemplate))
	template.Must(templates.New("image-README").Parse(imageReadmeTemplate))
}
