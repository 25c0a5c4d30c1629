package guest

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// objModule is one module a kbuild Makefile makes: "obj-$(CONFIG_UDF_FS)
// += udf.o" is {udf, UDF_FS}; "obj-m += udf.o" is {udf, ""}.
type objModule struct {
	Obj    string // the object's base name as written ("ext4-inode-test"): the .ko's name
	Name   string // normalized module name
	Symbol string // Kconfig symbol without CONFIG_; "" for obj-m
}

var objLineRE = regexp.MustCompile(`^obj-(?:\$\(CONFIG_([A-Za-z0-9_]+)\)|m)\s*[+:]?=\s*(.*)$`)

// makefileModules returns the modules a directory's kbuild Makefile makes,
// in order: every "x.o" on an obj-$(CONFIG_X) or obj-m line (continuation
// lines joined); subdirectories ("dir/") are not modules and are left out.
func makefileModules(mk []byte) []objModule {
	text := strings.ReplaceAll(string(mk), "\\\n", " ")
	var mods []objModule
	seen := make(map[string]bool)
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		m := objLineRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		for _, obj := range strings.Fields(m[2]) {
			base, ok := strings.CutSuffix(obj, ".o")
			if !ok || base == "" || strings.ContainsAny(base, "/$()") {
				continue
			}
			name := normModName(base)
			if !seen[name] {
				seen[name] = true
				mods = append(mods, objModule{Obj: base, Name: name, Symbol: m[1]})
			}
		}
	}
	return mods
}

// dirPlan is what one source directory's modules are to the kernel: Build
// are modules of its module tree (built and packed), Builtin are built
// into its image (a patched one cannot replace them), Absent are not
// configured at all.
type dirPlan struct {
	Dir     string // "fs/udf", or a module source directory
	Build   []objModule
	Builtin []string
	Absent  []objModule
}

// planDir sorts a directory's modules by what the kernel has.
func planDir(dir string, mods []objModule, idx *moduleIndex) dirPlan {
	p := dirPlan{Dir: dir}
	for _, m := range mods {
		switch {
		case idx.files[m.Name] != "":
			p.Build = append(p.Build, m)
		case idx.builtin[m.Name]:
			p.Builtin = append(p.Builtin, m.Name)
		case m.Symbol == "":
			p.Build = append(p.Build, m) // obj-m: a module of its own, new to the kernel
		default:
			p.Absent = append(p.Absent, m)
		}
	}
	return p
}

// checkPlans fails when no directory builds a module the kernel can load,
// saying why for each: built in (and where it is a module instead), not
// configured, or no module at all in the Makefile.
func checkPlans(plans []dirPlan, release, flavor string) error {
	var why []string
	for _, p := range plans {
		if len(p.Build) > 0 {
			return nil
		}
		switch {
		case len(p.Builtin) > 0:
			w := fmt.Sprintf("%s is %s, which kernel %s has built in, not as a loadable module", p.Dir, strings.Join(p.Builtin, ", "), release)
			if flavor != FlavorGeneric {
				w += "; use --flavor generic, whose kernel has it as a module"
			}
			why = append(why, w)
		case len(p.Absent) > 0:
			var syms []string
			for _, m := range p.Absent {
				syms = append(syms, "CONFIG_"+m.Symbol)
			}
			w := fmt.Sprintf("%s: %s not set in kernel %s (no module %s)", p.Dir, strings.Join(syms, ", "), release, p.Absent[0].Name)
			if flavor != FlavorGeneric {
				w += "; the generic flavour (--flavor generic) has more filesystems as modules"
			}
			why = append(why, w)
		default:
			why = append(why, fmt.Sprintf("%s: its Makefile names no module (no obj-$(CONFIG_...) += x.o or obj-m += x.o line)", p.Dir))
		}
	}
	sort.Strings(why)
	return fmt.Errorf("guest: nothing to build that the image can load: %s", strings.Join(why, "; "))
}

var compileErrRE = regexp.MustCompile(`^(\S+?):(\d+)(?::\d+)?: (?:fatal )?error: `)

// firstBuildError picks the line that explains a failed kbuild run: the
// compiler's first "file:line: error:" (with the scratch directory
// prefix cut, so it reads fs/udf/namei.c:12:3: error: ...), else the first
// "ERROR:" line (modpost: an undefined symbol), else the output's last
// lines.
func firstBuildError(out, scratch string) string {
	lines := strings.Split(strings.ReplaceAll(out, scratch+"/", ""), "\n")
	for _, l := range lines {
		if compileErrRE.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	for _, l := range lines {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "ERROR:") {
			return t
		}
	}
	return lastLines(strings.Join(lines, "\n"), 5)
}

// lastLines returns the last n non-empty lines of s, joined by " | ".
func lastLines(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, " | ")
}

var (
	patchingRE = regexp.MustCompile(`^(?:patching|checking) file '?([^']+)'?$`)
	hunkFailRE = regexp.MustCompile(`^Hunk #(\d+) FAILED at (\d+)`)
)

// patchFailure turns GNU patch's output into what went wrong: each failed
// hunk with its file and line, a patch already applied, a file the source
// lacks, or patch's own complaint.
func patchFailure(out string) string {
	var why []string
	file := "?"
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if m := patchingRE.FindStringSubmatch(l); m != nil {
			file = m[1]
			continue
		}
		switch m := hunkFailRE.FindStringSubmatch(l); {
		case m != nil:
			why = append(why, fmt.Sprintf("%s: hunk #%s FAILED at line %s", file, m[1], m[2]))
		case strings.HasPrefix(l, "Reversed (or previously applied) patch detected"):
			why = append(why, file+": already applied (or reversed)")
		case strings.HasPrefix(l, "can't find file to patch"):
			why = append(why, "a file it patches is not in this kernel's source ("+l+")")
		case strings.HasPrefix(l, "patch: **** "):
			why = append(why, strings.TrimPrefix(l, "patch: **** "))
		}
	}
	if len(why) == 0 {
		return lastLines(out, 5)
	}
	return strings.Join(why, "; ")
}

// withBuilt returns wanted with the built modules it lacks appended, so a
// patched module the defaults leave out (jfs on the generic kernel) is
// packed too.
func withBuilt(wanted, built []string) []string {
	have := make(map[string]bool)
	for _, w := range wanted {
		have[normModName(w)] = true
	}
	out := append([]string(nil), wanted...)
	for _, b := range built {
		if !have[b] {
			out = append(out, b)
		}
	}
	return out
}
