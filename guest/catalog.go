package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// NameGrammar is what an image name (Options.Name) may be.
var NameGrammar = regexp.MustCompile(`^[A-Za-z0-9._+-]{1,64}$`)

// namesFile maps image names to keys: <cache>/image-names.json.
const namesFile = "image-names.json"

// CheckName checks an image name against NameGrammar.
func CheckName(name string) error {
	if !NameGrammar.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("guest: image name %q: want 1 to 64 of A-Z a-z 0-9 . _ + -", name)
	}
	return nil
}

// readNames reads the name index; a missing one is empty.
func readNames(cacheDir string) (map[string]string, error) {
	b, err := readBoundedFile(filepath.Join(cacheDir, namesFile), maxManifest)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("guest: image names: %w", err)
	}
	names := map[string]string{}
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("guest: image names %s: %w", filepath.Join(cacheDir, namesFile), err)
	}
	return names, nil
}

// nameImage records name -> key in the index ("" records nothing), under
// an exclusive lock, and writes the index atomically. A name already
// given to another image moves to this one.
func nameImage(cacheDir, name, key string) error {
	if name == "" {
		return nil
	}
	if err := CheckName(name); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir, namesFile+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("guest: image names: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("guest: image names: lock: %w", err)
	}
	names, err := readNames(cacheDir)
	if err != nil {
		return err
	}
	if names[name] == key {
		return nil
	}
	names[name] = key
	b, err := json.MarshalIndent(names, "", "  ")
	if err != nil {
		return fmt.Errorf("guest: image names: %w", err)
	}
	return writeFileAtomic(filepath.Join(cacheDir, namesFile), append(b, '\n'))
}

// Listed is one image of the cache, as List returns it.
type Listed struct {
	Image
	Names []string
	Built time.Time // the manifest's modification time
}

// List returns the cache's images, newest first; damaged entries are
// left out.
func List(cacheDir string) ([]Listed, error) {
	entries, err := os.ReadDir(filepath.Join(cacheDir, "images"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("guest: list images: %w", err)
	}
	names, err := readNames(cacheDir)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string][]string)
	for _, n := range sortedKeys(names) {
		byKey[names[n]] = append(byKey[names[n]], n)
	}
	var out []Listed
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(cacheDir, "images", e.Name())
		img, err := Open(dir)
		if err != nil {
			continue
		}
		st, err := os.Stat(filepath.Join(dir, ManifestFile))
		if err != nil {
			continue
		}
		if img.Flavor == "" {
			img.Flavor = flavorOfRelease(img.KernelVersion)
		}
		out = append(out, Listed{Image: *img, Names: byKey[img.Key], Built: st.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Built.After(out[j].Built) })
	return out, nil
}

// flavorOfRelease guesses the flavour of an image built before the
// manifest recorded it, from its kernel release.
func flavorOfRelease(rel string) string {
	for _, f := range Flavors() {
		if kernelFlavors[f].pkg.MatchString("linux-image-" + rel) {
			return f
		}
	}
	return FlavorCustom
}
