package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Ref names an image for a record: what a session booted, what a run and
// its findings ran on. It says which kernel and which patches, not where
// the files lie.
type Ref struct {
	Key           string   `json:"key"`
	KernelVersion string   `json:"kernel_version"`
	Flavor        string   `json:"flavor,omitempty"`
	Patches       []Input  `json:"patches,omitempty"`
	Sources       []Input  `json:"module_sources,omitempty"`
	Built         []string `json:"built_modules,omitempty"`
}

// Ref returns img's Ref (nil img: nil).
func (img *Image) Ref() *Ref {
	if img == nil {
		return nil
	}
	return &Ref{Key: img.Key, KernelVersion: img.KernelVersion, Flavor: img.Flavor,
		Patches: img.Patches, Sources: img.Sources, Built: img.Built}
}

// Custom reports whether the image carries code of its own (patches or
// module sources) beyond a kernel package's.
func (r *Ref) Custom() bool { return r != nil && (len(r.Patches) > 0 || len(r.Sources) > 0) }

// String is the one line a person reads: kernel, flavour, patches.
func (r *Ref) String() string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(r.KernelVersion)
	if r.Flavor != "" {
		b.WriteString(" (" + r.Flavor + ")")
	}
	for _, p := range r.Patches {
		fmt.Fprintf(&b, ", patch %s %s", p.Name, short(p.BLAKE3))
	}
	for _, s := range r.Sources {
		fmt.Fprintf(&b, ", module source %s %s", s.Name, short(s.BLAKE3))
	}
	if len(r.Built) > 0 {
		b.WriteString(", built " + strings.Join(r.Built, " "))
	}
	fmt.Fprintf(&b, ", image %s", short(r.Key))
	return b.String()
}

func short(hash string) string { return hash[:min(len(hash), 12)] }

// PatchesDir is where an image keeps copies of the patches it was built
// from: <image>/patches/<n>.patch, n counting from 1 in Image.Patches'
// order (images built before it was kept have none).
const PatchesDir = "patches"

// PatchFile is the path of img's i-th patch (0-based) in its directory.
func (img *Image) PatchFile(i int) string {
	return filepath.Join(filepath.Dir(img.Kernel), PatchesDir, patchFileName(i))
}

func patchFileName(i int) string { return fmt.Sprintf("%d.patch", i+1) }

// ReadPatch reads img's i-th patch (0-based), bounded as a patch to build
// from is.
func (img *Image) ReadPatch(i int) ([]byte, error) {
	if i < 0 || i >= len(img.Patches) {
		return nil, fmt.Errorf("guest: image %s has no patch %d", short(img.Key), i+1)
	}
	b, err := readBoundedFile(img.PatchFile(i), maxPatchBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("guest: image %s keeps no copy of patch %s (built before images kept their patches: build it again)", short(img.Key), img.Patches[i].Name)
	}
	if err != nil {
		return nil, fmt.Errorf("guest: patch %s: %w", img.Patches[i].Name, err)
	}
	return b, nil
}

// Resolve finds an image of cacheDir's image cache by name (Options.Name),
// by key or a key's prefix of at least minKeyPrefix hex digits that names
// one image (guest list shows 16), or by its directory, and opens nothing outside the cache: a
// daemon opens what a client names this way.
func Resolve(cacheDir, ref string) (*Image, error) {
	if ref == "" {
		return nil, errors.New("guest: empty image reference")
	}
	root, err := filepath.EvalSymlinks(filepath.Join(cacheDir, "images"))
	if err != nil {
		return nil, fmt.Errorf("guest: the image cache: %w", err)
	}
	dir := ref
	if NameGrammar.MatchString(ref) && ref != "." && ref != ".." {
		names, err := readNames(cacheDir)
		if err != nil {
			return nil, err
		}
		key, named := names[ref]
		if !named {
			key = ref
		}
		dir = filepath.Join(root, key)
		if _, err := os.Stat(dir); err != nil && !named {
			if dir, err = keyPrefix(root, ref); err != nil {
				return nil, fmt.Errorf("guest: %w in %s (themisctl guest list shows them)", err, cacheDir)
			}
		}
	}
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("guest: image %q: %w", ref, err)
	}
	if filepath.Dir(abs) != root {
		return nil, fmt.Errorf("guest: image %q: %s is not directly under the image cache %s", ref, abs, root)
	}
	return Open(abs)
}

// minKeyPrefix is the shortest key prefix Resolve takes for a key.
const minKeyPrefix = 8

var hexPrefix = regexp.MustCompile(`^[0-9a-f]+$`)

// keyPrefix is the directory under root of the one image whose key starts
// with ref, a prefix of at least minKeyPrefix hex digits.
func keyPrefix(root, ref string) (string, error) {
	if len(ref) < minKeyPrefix || !hexPrefix.MatchString(ref) {
		return "", fmt.Errorf("no image named %q", ref)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", fmt.Errorf("the image cache: %w", err)
	}
	var found []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), ref) {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no image named %q, and no image key starts with it", ref)
	case 1:
		return filepath.Join(root, found[0]), nil
	}
	return "", fmt.Errorf("key prefix %q names %d images: give more of the key", ref, len(found))
}
