package guest

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// fakeBzImage returns a minimal bzImage whose setup header carries the
// version string version.
func fakeBzImage(version string) []byte {
	img := make([]byte, 0x400)
	copy(img[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(img[0x20e:], 0x100) // the string at 0x300
	copy(img[0x300:], version+" (dev@host) #1 SMP\x00")
	return img
}

// fakeKernelTree writes a built kernel tree: bzImage with version bz,
// include/config/kernel.release rel, and module a.ko under
// lib/modules/<rel> when installed, else in the tree.
func fakeKernelTree(t *testing.T, rel, bz string, installed bool) string {
	t.Helper()
	tree := t.TempDir()
	files := map[string][]byte{
		"arch/x86/boot/bzImage":          fakeBzImage(bz),
		"include/config/kernel.release":  []byte(rel + "\n"),
		"include/generated/utsrelease.h": []byte(`#define UTS_RELEASE "` + rel + `"` + "\n"),
		"Makefile":                       []byte("VERSION = 6\n"),
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Join(tree, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mods := tree
	if installed {
		mods = filepath.Join(tree, "lib", "modules", rel)
	}
	writeFakeTree(t, mods, map[string]string{"fs/a/a.ko": "", "fs/b/b.ko": ""})
	return tree
}

func TestKernelTree(t *testing.T) {
	t.Parallel()
	agent := stubAgent(t)
	tests := []struct {
		name     string
		tree     func() string
		o        Options
		wantMods string // "" when an error is wanted
		wantErr  string
	}{
		{name: "modules installed in the tree", tree: func() string { return fakeKernelTree(t, "6.1.0-dev", "6.1.0-dev", true) }, wantMods: "lib/modules/6.1.0-dev"},
		{name: "modules where the build left them", tree: func() string { return fakeKernelTree(t, "6.1.0-dev", "6.1.0-dev", false) }, wantMods: "."},
		{name: "bzImage of another build", tree: func() string { return fakeKernelTree(t, "6.1.0-dev", "6.1.0-old", true) },
			wantErr: "bzImage is kernel 6.1.0-old but include/config/kernel.release says 6.1.0-dev"},
		{name: "modules dir of another release", tree: func() string { return fakeKernelTree(t, "6.1.0-dev", "6.1.0-dev", true) },
			o: Options{ModulesDir: "/x/lib/modules/6.1.0-other"}, wantErr: "is not for kernel 6.1.0-dev"},
		{name: "not built", tree: func() string { return t.TempDir() }, wantErr: "include/config/kernel.release"},
		{name: "with --kernel", tree: func() string { return t.TempDir() }, o: Options{Kernel: "/k"}, wantErr: "replaces --kernel"},
		{name: "a patch needs the Debian source", tree: func() string { return fakeKernelTree(t, "6.1.0-dev", "6.1.0-dev", true) },
			o: Options{Patches: []string{writePatch(t, "--- a/fs/a/a.c\n+++ b/fs/a/a.c\n")}}, wantErr: "--patch applies to a Debian kernel package's source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := tt.tree()
			o := tt.o
			o.CacheDir, o.KernelTree, o.Agent, o.Modules, o.Log = t.TempDir(), tree, agent, []string{"a"}, zaptest.NewLogger(t)
			img, err := Build(context.Background(), o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if img.KernelVersion != "6.1.0-dev" || img.Flavor != "custom" || len(img.Modules) != 1 {
				t.Errorf("image %+v", img)
			}
			kt, err := resolveKernelTree(o)
			if err != nil || kt.ModulesDir != filepath.Join(tree, tt.wantMods) {
				t.Errorf("modules dir %v (%v), want %s", kt, err, tt.wantMods)
			}
		})
	}
}

func TestBzImageVersion(t *testing.T) {
	t.Parallel()
	if v, err := bzImageVersion(fakeBzImage("6.12.0-rc1+")); err != nil || v != "6.12.0-rc1+" {
		t.Errorf("version %q, %v", v, err)
	}
	empty := fakeBzImage("")
	copy(empty[0x300:], "\x00")
	for _, img := range [][]byte{nil, make([]byte, 0x400), empty} {
		if v, err := bzImageVersion(img); err == nil {
			t.Errorf("accepted %d bytes as version %q", len(img), v)
		}
	}
}

// writePatch writes a patch file and returns its path.
func writePatch(t *testing.T, patch string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.patch")
	if err := os.WriteFile(p, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageNames names fake images, finds them by name, key and
// directory, moves a name, and lists them.
func TestImageNames(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	tree := fakeKernelTree(t, "6.1.0-dev", "6.1.0-dev", true)
	build := func(name string, mods ...string) *Image {
		img, err := Build(context.Background(), Options{CacheDir: cache, KernelTree: tree, Agent: stubAgent(t), Modules: mods, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	first := build("dev", "a")
	for _, ref := range []string{"dev", first.Key, first.Key[:16], first.Key[:minKeyPrefix], filepath.Dir(first.Kernel)} {
		if img, err := Resolve(cache, ref); err != nil || img.Key != first.Key || img.Flavor != "custom" {
			t.Errorf("Resolve(%s) = %+v, %v", ref, img, err)
		}
	}
	if _, err := Resolve(cache, "nope"); err == nil || !strings.Contains(err.Error(), `no image named "nope"`) {
		t.Errorf("Resolve(nope) err = %v", err)
	}
	for ref, want := range map[string]string{first.Key[:minKeyPrefix-1]: `no image named`, "0123456789abcdef": "no image key starts with it", "abcd0123": "names 2 images"} {
		for _, d := range []string{"abcd0123aa", "abcd0123bb"} {
			if err := os.MkdirAll(filepath.Join(cache, "images", d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Resolve(cache, ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%s) err = %v, want %q", ref, err, want)
		}
	}
	outside := t.TempDir() // an image directory outside the cache is refused
	if err := os.CopyFS(filepath.Join(outside, "img"), os.DirFS(filepath.Dir(first.Kernel))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "img"), filepath.Join(cache, "images", "link")); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{filepath.Join(outside, "img"), "link", filepath.Join(cache, "images", "link"), "", "..", filepath.Join(cache, "images")} {
		if img, err := Resolve(cache, ref); err == nil {
			t.Errorf("Resolve(%q) = %s, want refused", ref, img.Kernel)
		}
	}
	if _, err := Build(context.Background(), Options{CacheDir: cache, KernelTree: tree, Name: "a/b"}); err == nil || !strings.Contains(err.Error(), "image name") {
		t.Errorf("bad name: err = %v", err)
	}
	second := build("dev", "b") // another image, and the name moves to it
	if img, err := Resolve(cache, "dev"); err != nil || img.Key != second.Key || second.Key == first.Key {
		t.Errorf("Resolve(dev) after a rebuild = %+v, %v", img, err)
	}
	build("old", "a")
	list, err := List(cache)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	names := map[string]string{}
	for _, l := range list {
		names[l.Key] = strings.Join(l.Names, ",")
		if l.Flavor != "custom" || l.KernelVersion != "6.1.0-dev" || l.Built.IsZero() {
			t.Errorf("listed %+v", l)
		}
	}
	if names[first.Key] != "old" || names[second.Key] != "dev" {
		t.Errorf("names by key %v", names)
	}
}
