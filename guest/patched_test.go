package guest

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// exfatGetattrLine is the line of fs/exfat/file.c (Linux 6.1) the real
// test patches: exfat_getattr then reports every regular file one byte
// longer than it is, a change any stat shows.
const exfatGetattrLine = "\tstat->blksize = EXFAT_SB(inode->i_sb)->cluster_size;"

// realSource returns the shared cache (where the real kernel package and
// the extracted kernel source live) and the extracted source of the real
// kernel's linux-source package. It skips when the source or headers
// packages are not installed, unless CI is set.
func realSource(t *testing.T) (cache, src string, kt *kernelTree) {
	t.Helper()
	kt = realTree(t)
	ctx := context.Background()
	ver, err := debVersion(ctx, kt.Source)
	if err != nil {
		t.Fatal(err)
	}
	tarball, terr := sourceTarball(Options{}, ver)
	_, herr := headersDir(Options{}, kt.Version)
	for _, err := range []error{terr, herr} {
		if err == nil {
			continue
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (scripts/install-deps.sh installs it)", err)
		}
		t.Skipf("skipping: %v", err)
	}
	if cache, err = DefaultCacheDir(); err != nil {
		t.Fatal(err)
	}
	if src, _, err = extractSource(ctx, zaptest.NewLogger(t), tarball, cache); err != nil {
		t.Fatal(err)
	}
	return cache, src, kt
}

// lineDiff writes a unified diff that replaces the line old of the file
// rel (under src, e.g. "fs/exfat/file.c") with the lines new, with three
// lines of context, and returns its path.
func lineDiff(t *testing.T, src, rel, old string, new ...string) string {
	t.Helper()
	lines := strings.Split(string(mustRead(t, filepath.Join(src, rel))), "\n")
	at := -1
	for i, l := range lines {
		if l == old {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatalf("%s has no line %q", rel, old)
	}
	lo, hi := max(at-3, 0), min(at+4, len(lines))
	var b bytes.Buffer
	fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n@@ -%d,%d +%d,%d @@\n", rel, rel, lo+1, hi-lo, lo+1, hi-lo-1+len(new))
	for i := lo; i < hi; i++ {
		if i != at {
			b.WriteString(" " + lines[i] + "\n")
			continue
		}
		b.WriteString("-" + old + "\n")
		for _, n := range new {
			b.WriteString("+" + n + "\n")
		}
	}
	p := filepath.Join(t.TempDir(), strings.ReplaceAll(filepath.Dir(rel), "/", "-")+".patch")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// patchedCache returns an empty cache directory that shares the real
// kernel packages and extracted sources of the shared one, so the test
// builds its modules and image from scratch without unpacking 138 MB again.
func patchedCache(t *testing.T, shared string) string {
	t.Helper()
	cache := t.TempDir()
	for _, d := range []string{"kernels", "ksrc"} {
		if err := os.Symlink(filepath.Join(shared, d), filepath.Join(cache, d)); err != nil {
			t.Fatal(err)
		}
	}
	return cache
}

// TestBuildPatchedModuleReal builds the real cloud kernel's exfat module
// from its Debian source with a one-line change (getattr reports regular
// files a byte longer), packs it into an image in place of the stock one,
// and checks the image holds it: other bytes than the stock module, its
// name and the kernel's vermagic, no debug info; then that an unchanged
// build is cached and the stock image has another key.
func TestBuildPatchedModuleReal(t *testing.T) {
	shared, src, kt := realSource(t)
	ctx := context.Background()
	patch := lineDiff(t, src, "fs/exfat/file.c", exfatGetattrLine, exfatGetattrLine, "\tif (S_ISREG(inode->i_mode))", "\t\tstat->size += 1; /* themis test: off by one */")
	o := Options{CacheDir: patchedCache(t, shared), Deb: kt.Source, Agent: stubAgent(t), Patches: []string{patch}, Name: "exfat-off-by-one", Log: zaptest.NewLogger(t)}
	start := time.Now()
	img, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	cold := time.Since(start)
	if img.Cached || !reflect.DeepEqual(img.Built, []string{"exfat"}) || len(img.Patches) != 1 || img.Patches[0].Name != filepath.Base(patch) || img.Flavor != FlavorCloud {
		t.Fatalf("image = %+v", img)
	}
	packed := packedModule(t, img, "exfat")
	stock, err := readModuleFile(ctx, filepath.Join(kt.ModulesDir, "kernel", "fs", "exfat", "exfat.ko"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(packed, stock) {
		t.Fatal("the image holds the stock exfat.ko")
	}
	if v := modinfoField(t, packed, "vermagic"); strings.Fields(v)[0] != img.KernelVersion || v != modinfoField(t, stock, "vermagic") {
		t.Errorf("vermagic %q, stock %q, kernel %s", v, modinfoField(t, stock, "vermagic"), img.KernelVersion)
	}
	if name := modinfoField(t, packed, "name"); name != "exfat" {
		t.Errorf("packed module is %q", name)
	}
	if f, err := elf.NewFile(bytes.NewReader(packed)); err != nil || f.Section(".debug_info") != nil {
		t.Errorf("packed exfat.ko: err %v, or it carries debug info", err)
	}
	start = time.Now()
	again, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("patched exfat image: cold %v (module build and image), cached %v", cold, time.Since(start))
	if !again.Cached || again.Key != img.Key {
		t.Errorf("unchanged rebuild: cached %v key %s, want %s", again.Cached, again.Key, img.Key)
	}
	named, err := Resolve(o.CacheDir, "exfat-off-by-one")
	if err != nil || named.Key != img.Key || !reflect.DeepEqual(named.Patches, img.Patches) {
		t.Errorf("Resolve(name) = %+v, %v", named, err)
	}
	want, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := named.ReadPatch(0); err != nil || !bytes.Equal(kept, want) {
		t.Errorf("the image's copy of the patch: %v, equal %v", err, bytes.Equal(kept, want))
	}
	o.Patches, o.Name = nil, ""
	if plain, err := Build(ctx, o); err != nil || plain.Key == img.Key || !bytes.Equal(packedModule(t, plain, "exfat"), stock) {
		t.Errorf("stock image: %v, key %s (patched %s)", err, plain.Key, img.Key)
	}
}

// TestPatchErrorsReal gives the real toolchain a patch that does not
// apply, one that does not compile and one of the built-in ext4.
func TestPatchErrorsReal(t *testing.T) {
	shared, src, kt := realSource(t)
	tests := []struct {
		name  string
		patch func() string
		want  []string
	}{
		{"does not apply", func() string {
			p := lineDiff(t, src, "fs/exfat/file.c", exfatGetattrLine, "\tstat->blksize = 1;")
			b := bytes.Replace(mustRead(t, p), []byte(" \tstat->btime.tv_nsec"), []byte(" \tstat->btime.tv_usec"), 1)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, []string{"does not apply: fs/exfat/file.c: hunk #1 FAILED at line"}},
		{"does not compile", func() string {
			return lineDiff(t, src, "fs/exfat/file.c", exfatGetattrLine, "\tstat->blksize = themis_nope;")
		}, []string{"fs/exfat does not build: fs/exfat/file.c:", "error: 'themis_nope' undeclared"}},
		{"ext4 is built into the cloud kernel", func() string {
			return lineDiff(t, src, "fs/ext4/file.c", "#include <linux/time.h>", "#include <linux/time.h> /* themis */")
		}, []string{"fs/ext4 is ext4, which kernel " + kt.Version + " has built in", "--flavor generic"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{CacheDir: patchedCache(t, shared), Deb: kt.Source, Agent: "/nonexistent", Patches: []string{tt.patch()}}
			_, err := Build(context.Background(), o)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want %q in it", err, w)
				}
			}
		})
	}
}

// packedModule returns a module's bytes from an image's initramfs.
func packedModule(t *testing.T, img *Image, name string) []byte {
	t.Helper()
	for _, r := range parseNewc(t, mustRead(t, img.Initramfs)) {
		if r.Name == "modules/"+name+".ko" {
			return r.Data
		}
	}
	t.Fatalf("no modules/%s.ko in %s", name, img.Initramfs)
	return nil
}

// modinfoField returns one .modinfo field of a module.
func modinfoField(t *testing.T, data []byte, key string) string {
	t.Helper()
	kv, err := modinfo(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range kv {
		if f[0] == key {
			return f[1]
		}
	}
	t.Fatalf("no %s in .modinfo", key)
	return ""
}

// TestBuildModuleSrcReal builds exfat from a developer's copy of fs/exfat
// (with a stale object file, which is left out) against the real headers.
func TestBuildModuleSrcReal(t *testing.T) {
	shared, src, kt := realSource(t)
	dir := filepath.Join(t.TempDir(), "exfat")
	if err := copyTree(filepath.Join(src, "fs", "exfat"), dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "inode.o"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{CacheDir: patchedCache(t, shared), Deb: kt.Source, Agent: stubAgent(t), ModuleSrcs: []string{dir}, Log: zaptest.NewLogger(t)}
	img, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(img.Built, []string{"exfat"}) || len(img.Sources) != 1 || img.Sources[0].Name != dir {
		t.Fatalf("image = %+v", img)
	}
	if v := modinfoField(t, packedModule(t, img, "exfat"), "vermagic"); strings.Fields(v)[0] != kt.Version {
		t.Errorf("vermagic %q, kernel %s", v, kt.Version)
	}
	if err := os.WriteFile(filepath.Join(dir, "inode.o"), []byte("staler"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := Build(context.Background(), o); err != nil || again.Key != img.Key || !again.Cached {
		t.Errorf("a changed build product changed the image: %+v, %v", again, err)
	}
}
