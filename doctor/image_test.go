package doctor

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/guest"
)

// The container image's recipe (docs/image.md), from this package's dir.
const (
	imagePackages = "../deploy/image/packages"
	containerfile = "../deploy/Containerfile"
	imageContext  = "../scripts/image-context.sh"
	buildImage    = "../scripts/build-image.sh"
	installDeps   = "../scripts/install-deps.sh"
)

// imageBase is what the image's base (Debian minbase, or debian:SUITE-slim)
// holds of the packages doctor's tools come from.
var imageBase = []string{"dpkg", "apt"}

// debianName is a Debian package name (Debian Policy 5.6.1).
var debianName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// imagePackageList is deploy/image/packages: one name a line, '#' comments.
func imagePackageList(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for i, l := range strings.Split(readFile(t, imagePackages), "\n") {
		l, _, _ = strings.Cut(l, "#")
		for _, p := range strings.Fields(l) {
			if !debianName.MatchString(p) {
				t.Errorf("%s:%d: %q is not a Debian package name", imagePackages, i+1, p)
			}
			if slices.Contains(pkgs, p) {
				t.Errorf("%s:%d: %s twice", imagePackages, i+1, p)
			}
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("%s: no packages", imagePackages)
	}
	return pkgs
}

// TestImagePackages checks that the image holds every program doctor looks
// for, and that the host packages (scripts/install-deps.sh, which CI's
// image smoke compares against) include the image's.
func TestImagePackages(t *testing.T) {
	pkgs := imagePackageList(t)
	for _, tool := range tools {
		if !slices.Contains(pkgs, tool.Package) && !slices.Contains(imageBase, tool.Package) {
			t.Errorf("doctor looks for %s (package %s), which %s does not install", tool.Name, tool.Package, imagePackages)
		}
	}
	m := regexp.MustCompile(`(?m)^pkgs=\(([^)]*)\)$`).FindStringSubmatch(readFile(t, installDeps))
	if m == nil {
		t.Fatalf("%s: no pkgs=(...) line", installDeps)
	}
	host := strings.Fields(m[1])
	for _, p := range pkgs {
		if p != "util-linux" && !slices.Contains(host, p) { // util-linux: Essential on the host
			t.Errorf("the image installs %s, %s does not", p, installDeps)
		}
	}
}

// TestContainerfile checks that deploy/Containerfile keeps to what
// scripts/build-image.sh reads of it, and that both recipes take the same
// context: the package list, root/ with the guest image where
// THEMIS_GUEST_IMAGE says.
func TestContainerfile(t *testing.T) {
	cf := readFile(t, containerfile)
	var froms []string
	env := map[string]string{}
	var entrypoint []string
	continued := false
	for i, l := range strings.Split(cf, "\n") {
		n := i + 1
		if continued {
			continued = strings.HasSuffix(l, `\`)
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(l, " ")
		switch instr {
		case "FROM":
			froms = append(froms, rest)
		case "ENV", "LABEL":
			k, v, ok := strings.Cut(rest, "=")
			if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`).MatchString(k) || strings.ContainsAny(v, "$\"' \t") {
				t.Errorf("%s:%d: want %s NAME=value (one, plain), got %q", containerfile, n, instr, l)
			}
			if instr == "ENV" {
				env[k] = v
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil || len(entrypoint) == 0 {
				t.Errorf("%s:%d: ENTRYPOINT must be a JSON array: %q", containerfile, n, l)
			}
		case "WORKDIR", "COPY", "RUN":
			continued = strings.HasSuffix(l, `\`)
		default:
			t.Errorf("%s:%d: %s: scripts/build-image.sh does not follow it", containerfile, n, instr)
		}
	}
	if len(froms) != 1 || !regexp.MustCompile(`^debian:[a-z]+-slim$`).MatchString(froms[0]) {
		t.Errorf("%s: FROM %q, want one FROM debian:SUITE-slim (build-image.sh bootstraps SUITE)", containerfile, froms)
	}
	if len(entrypoint) == 0 || entrypoint[0] != "themisctl" {
		t.Errorf("%s: ENTRYPOINT %q, want themisctl", containerfile, entrypoint)
	}
	img := env[guest.PrebuiltEnv]
	if !strings.HasPrefix(img, "/") || env["THEMIS_CACHE_DIR"] == "" {
		t.Fatalf("%s: want ENV %s=/ABS and THEMIS_CACHE_DIR, got %v", containerfile, guest.PrebuiltEnv, env)
	}
	for _, want := range []string{"COPY packages ", "COPY root/ /\n", "apt-get install -y --no-install-recommends"} {
		if !strings.Contains(cf, want) {
			t.Errorf("%s: no %q", containerfile, want)
		}
	}
	ctx := readFile(t, imageContext)
	for _, want := range []string{
		`cp deploy/image/packages "$ctx/packages"`,
		`"$root` + img + `"`,
		`"$root` + env["THEMIS_CACHE_DIR"] + `"`,
		`"$dir/` + guest.KernelFile + `" "$dir/` + guest.InitramfsFile + `" "$dir/` + guest.ManifestFile + `" "$root` + img + `/"`,
		"CGO_ENABLED=0",
	} {
		if !strings.Contains(ctx, want) {
			t.Errorf("%s: no %q", imageContext, want)
		}
	}
	bi := readFile(t, buildImage)
	for _, want := range []string{"cf=deploy/Containerfile", `"$ctx/packages"`, `sync-in $ctx/root /`, "--variant=minbase"} {
		if !strings.Contains(bi, want) {
			t.Errorf("%s: no %q", buildImage, want)
		}
	}
}
