package bugs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Classes are the bug classes a case may have (README.md).
var Classes = []string{"wrong-result", "lost-update", "crash-consistency", "timestamps", "kernel-crash", "on-disk"}

// Kinds of case: an upstream fix reverted, or a known bug class re-created.
const (
	KindRevert     = "revert"
	KindRecreation = "re-creation"
)

// maxManifest bounds a case.toml.
const maxManifest = 64 << 10

var idPattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)+$`)

// Case is one bug of the corpus.
type Case struct {
	ID        string `toml:"id"`
	FS        string `toml:"fs"`
	Flavor    string `toml:"flavor"`
	Class     string `toml:"class"`
	Kind      string `toml:"kind"`
	Fix       string `toml:"fix"`
	Reference string `toml:"reference"`
	Summary   string `toml:"summary"`
	// Patch is the case's bug.patch (an absolute path when the corpus
	// directory was).
	Patch string `toml:"-"`
}

// Load reads every case under dir (a subdirectory with a case.toml), in
// the order of their ids, and checks each (Case.Check).
func Load(dir string) ([]Case, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bugs: %w", err)
	}
	var out []Case
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		c, err := loadCase(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // not a case
		}
		if err != nil {
			return nil, err
		}
		if c.ID != e.Name() {
			return nil, fmt.Errorf("bugs: %s: id %q is not its directory's name", e.Name(), c.ID)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func loadCase(dir string) (Case, error) {
	f, err := os.Open(filepath.Join(dir, "case.toml"))
	if err != nil {
		return Case{}, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(&limited{r: f, n: maxManifest}); err != nil {
		return Case{}, fmt.Errorf("bugs: %s: %w", dir, err)
	}
	var c Case
	dec := toml.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			var keys []string
			for _, e := range strict.Errors {
				keys = append(keys, strings.Join(e.Key(), "."))
			}
			return Case{}, fmt.Errorf("bugs: %s/case.toml: unknown field(s) %s (a case holds no command of its own)", dir, strings.Join(keys, ", "))
		}
		return Case{}, fmt.Errorf("bugs: %s/case.toml: %w", dir, err)
	}
	c.Patch = filepath.Join(dir, "bug.patch")
	if err := c.Check(); err != nil {
		return Case{}, fmt.Errorf("bugs: %s: %w", dir, err)
	}
	return c, nil
}

// limited reads at most n bytes and fails past them.
type limited struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("case.toml larger than %d bytes", maxManifest)
	}
	if len(p) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= n
	return n, err
}

// Check checks the manifest's fields and the patch: it exists and touches
// files under fs/ only.
func (c Case) Check() error {
	switch {
	case !idPattern.MatchString(c.ID) || len(c.ID) > 64:
		return fmt.Errorf("id %q: want <fs>-<slug>, lower case, at most 64", c.ID)
	case !strings.HasPrefix(c.ID, c.FS+"-"):
		return fmt.Errorf("id %q: want it to start with its fs %q", c.ID, c.FS)
	case c.Flavor != "cloud" && c.Flavor != "generic":
		return fmt.Errorf("flavor %q: want cloud or generic", c.Flavor)
	case !slices.Contains(Classes, c.Class):
		return fmt.Errorf("class %q: want one of %s", c.Class, strings.Join(Classes, ", "))
	case c.Kind != KindRevert && c.Kind != KindRecreation:
		return fmt.Errorf("kind %q: want %s or %s", c.Kind, KindRevert, KindRecreation)
	case c.Fix == "" || c.Reference == "" || c.Summary == "":
		return errors.New("fix, reference and summary are required")
	}
	patch, err := os.ReadFile(c.Patch)
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	return checkPatch(patch)
}

// checkPatch checks that every file a -p1 patch touches is under fs/.
func checkPatch(patch []byte) error {
	files := 0
	for _, line := range strings.Split(string(patch), "\n") {
		if !strings.HasPrefix(line, "+++ ") && !strings.HasPrefix(line, "--- ") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(line[4:]), "\t")
		_, rest, ok := strings.Cut(name, "/")
		if !ok || !strings.HasPrefix(rest, "fs/") || strings.Contains(rest, "..") {
			return fmt.Errorf("patch touches %q: only files under fs/ may be", name)
		}
		files++
	}
	if files == 0 {
		return errors.New("patch touches no file")
	}
	return nil
}
