package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/hosttool"
	"go.uber.org/zap/zaptest"
)

// wantDefaultOrder is the load order of DefaultModules on the Debian 6.1
// cloud kernel.
var wantDefaultOrder = []string{
	"virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio", "virtio_pci",
	"virtio_blk", "virtio_console", "fat", "vfat", "nls_cp437", "nls_ascii", "overlay",
	"zstd_compress", "raid6_pq", "xor", "libcrc32c", "btrfs", "xfs", "exfat", "cdrom", "crc_itu_t", "udf",
}

// TestBuildRealDeb builds the guest from the real Debian kernel package,
// checks the initramfs against an independent newc reader, and checks that
// an unchanged rebuild is a no-op.
func TestBuildRealDeb(t *testing.T) {
	deb := realDeb(t)
	agent := stubAgent(t)
	cache := t.TempDir()
	ctx := context.Background()
	o := Options{CacheDir: cache, Deb: deb, Agent: agent, Log: zaptest.NewLogger(t)}

	start := time.Now()
	img, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	cold := time.Since(start)
	if img.Cached {
		t.Error("first build reported Cached")
	}
	if !strings.HasSuffix(img.KernelVersion, "-cloud-amd64") {
		t.Errorf("KernelVersion = %q", img.KernelVersion)
	}
	if strings.HasPrefix(img.KernelVersion, "6.1.") || strings.HasPrefix(img.KernelVersion, "6.1.0-") {
		if !reflect.DeepEqual(img.Modules, wantDefaultOrder) {
			t.Errorf("Modules = %q, want %q", img.Modules, wantDefaultOrder)
		}
	}
	wantDir := filepath.Join(cache, "images", img.Key)
	if img.Kernel != filepath.Join(wantDir, KernelFile) || img.Initramfs != filepath.Join(wantDir, InitramfsFile) {
		t.Errorf("paths %s, %s not under %s", img.Kernel, img.Initramfs, wantDir)
	}
	kernel := mustRead(t, img.Kernel)
	initramfs := mustRead(t, img.Initramfs)
	t.Logf("kernel %s: %d bytes; initramfs: %d bytes; modules %q; cold build %v", img.KernelVersion, len(kernel), len(initramfs), img.Modules, cold)
	if !bytes.Contains(kernel[:4096], []byte("HdrS")) {
		t.Error("kernel is not a bzImage (no HdrS)")
	}
	checkInitramfs(t, initramfs, mustRead(t, agent), img.Modules, img.Lazy)
	for _, m := range LazyModules {
		if !slices.Contains(DefaultModules, m) {
			continue // the generic flavour's
		}
		if len(img.Lazy) > 0 && !slices.Contains(img.Lazy, m) {
			t.Errorf("Lazy = %q, want %s and what only the deferred filesystems need", img.Lazy, m)
		}
	}

	var m manifest
	if err := json.Unmarshal(mustRead(t, filepath.Join(wantDir, ManifestFile)), &m); err != nil {
		t.Fatal(err)
	}
	if m.Key != img.Key || m.Format != imageFormat || m.Initramfs.Size != int64(len(initramfs)) || m.KernelSource != filepath.Base(deb) {
		t.Errorf("manifest = %+v", m)
	}

	// Unchanged inputs: nothing rebuilt, same key, same bytes.
	start = time.Now()
	again, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cached build %v", time.Since(start))
	if !again.Cached || again.Key != img.Key || again.Initramfs != img.Initramfs {
		t.Errorf("second build = %+v, want Cached with key %s", again, img.Key)
	}

	// Another cache directory builds byte-identical files (from the shared
	// unpacked tree, to save unpacking the package again).
	kt := realTree(t)
	o2 := Options{CacheDir: t.TempDir(), Kernel: kt.Kernel, ModulesDir: kt.ModulesDir, Agent: agent}
	other, err := Build(ctx, o2)
	if err != nil {
		t.Fatal(err)
	}
	if other.Key != img.Key || !bytes.Equal(mustRead(t, other.Initramfs), initramfs) {
		t.Error("fresh cache built a different image")
	}

	// A damaged entry is rebuilt, not trusted.
	if err := os.WriteFile(img.Initramfs, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if fixed.Cached || !bytes.Equal(mustRead(t, fixed.Initramfs), initramfs) {
		t.Errorf("damaged entry: Cached=%v, bytes restored=%v", fixed.Cached, bytes.Equal(mustRead(t, fixed.Initramfs), initramfs))
	}

	// Other modules: another key; '-' and '_' are equal.
	o3 := o
	o3.Modules = []string{"virtio-blk"}
	small, err := Build(ctx, o3)
	if err != nil {
		t.Fatal(err)
	}
	if small.Key == img.Key || small.Cached {
		t.Errorf("module change kept key %s (cached %v)", small.Key, small.Cached)
	}
	if want := []string{"virtio_ring", "virtio", "virtio_blk"}; !reflect.DeepEqual(small.Modules, want) {
		t.Errorf("Modules = %q, want %q", small.Modules, want)
	}

	// A kernel image + module tree gives the same image as the package.
	o4 := Options{CacheDir: cache, Kernel: kt.Kernel, ModulesDir: kt.ModulesDir, Agent: agent}
	direct, err := Build(ctx, o4)
	if err != nil {
		t.Fatal(err)
	}
	if direct.Key != img.Key || !direct.Cached || direct.KernelVersion != img.KernelVersion {
		t.Errorf("Kernel/ModulesDir build = %+v, want cached key %s", direct, img.Key)
	}

	entries, err := os.ReadDir(filepath.Join(cache, "images"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary entry left behind: %s", e.Name())
		}
	}
}

// checkInitramfs parses the archive and checks the layout the agent relies on.
func checkInitramfs(t *testing.T, b, agent []byte, modules, lazy []string) {
	t.Helper()
	recs := parseNewc(t, b)
	byName := make(map[string]cpioRecord)
	var names []string
	for i, r := range recs {
		if r.Ino != uint32(i+1) || r.UID != 0 || r.GID != 0 || r.Mtime != 0 {
			t.Errorf("%s: ino %d uid %d gid %d mtime %d", r.Name, r.Ino, r.UID, r.GID, r.Mtime)
		}
		byName[r.Name] = r
		names = append(names, r.Name)
	}
	for _, d := range []string{"dev", "proc", "sys", "lanes", "tmp", "mnt", "modules"} {
		if r, ok := byName[d]; !ok || r.Mode&0o170000 != 0o040000 {
			t.Errorf("directory /%s missing (%+v)", d, r)
		}
	}
	if r := byName["dev/console"]; r.Mode != 0o020600 || r.RMajor != 5 || r.RMinor != 1 {
		t.Errorf("/dev/console = mode %o rdev %d:%d", r.Mode, r.RMajor, r.RMinor)
	}
	init := byName["init"]
	if init.Mode != 0o100755 || !bytes.Equal(init.Data, agent) {
		t.Errorf("/init mode %o, %d bytes; want 0100755 and the agent (%d bytes)", init.Mode, len(init.Data), len(agent))
	}
	var order, deferred []string
	for _, m := range modules {
		if slices.Contains(lazy, m) {
			deferred = append(deferred, m+".ko")
		} else {
			order = append(order, m+".ko")
		}
		r, ok := byName["modules/"+m+".ko"]
		if !ok {
			t.Errorf("/modules/%s.ko missing", m)
			continue
		}
		if _, err := modinfo(r.Data); err != nil {
			t.Errorf("/modules/%s.ko: %v", m, err)
		}
	}
	if got, want := string(byName["modules/order"].Data), strings.Join(order, "\n")+"\n"; got != want {
		t.Errorf("/modules/order = %q, want %q", got, want)
	}
	if len(deferred) > 0 {
		if got, want := string(byName["modules/lazy"].Data), strings.Join(deferred, "\n")+"\n"; got != want {
			t.Errorf("/modules/lazy = %q, want %q", got, want)
		}
	}
	want := 7 + 1 + 1 + 1 + len(modules)
	if len(deferred) > 0 {
		want++
	}
	for _, n := range names {
		fsName, ok := strings.CutPrefix(n, "modules/lazy.")
		if !ok {
			continue
		}
		want++
		list := strings.Fields(string(byName[n].Data))
		if len(list) == 0 || list[len(list)-1] != fsName+".ko" {
			t.Errorf("/%s = %q: want the filesystem's module last", n, list)
		}
		for _, m := range list {
			if !slices.Contains(deferred, m) {
				t.Errorf("/%s lists %s, which is not deferred", n, m)
			}
		}
	}
	if len(recs) != want {
		t.Errorf("%d entries %q, want %d", len(recs), names, want)
	}
}

// TestBootRealGuest boots the built image under QEMU (TCG) with the stub
// /init: the kernel must unpack the uncompressed initramfs and load every
// module in /modules/order (and none of /modules/lazy).
func TestBootRealGuest(t *testing.T) {
	kt := realTree(t)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
		}
		t.Skip("skipping: qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
	}
	img, err := Build(context.Background(), Options{CacheDir: t.TempDir(), Kernel: kt.Kernel, ModulesDir: kt.ModulesDir, Agent: stubAgent(t), Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, qemu, "-accel", "tcg", "-m", "128", "-nographic", "-no-reboot",
		"-nodefaults", "-serial", "stdio", "-kernel", img.Kernel, "-initrd", img.Initramfs,
		"-append", "console=ttyS0 panic=-1 quiet")
	out, err := cmd.CombinedOutput()
	t.Logf("boot took %v", time.Since(start))
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "INITSTUB OK") {
		t.Fatalf("guest did not report success:\n%s", s)
	}
	for _, m := range img.Modules {
		loaded := strings.Contains(s, "INITSTUB loaded "+m+".ko")
		switch lazy := slices.Contains(img.Lazy, m); {
		case !lazy && !loaded:
			t.Errorf("module %s not loaded:\n%s", m, s)
		case lazy && loaded:
			t.Errorf("module %s is deferred to /modules/lazy but was loaded at boot", m)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cache := t.TempDir()

	// A package without a kernel image.
	if _, err := exec.LookPath("dpkg-deb"); err == nil {
		root := t.TempDir()
		for p, data := range map[string]string{
			"DEBIAN/control":       "Package: linux-image-fake\nVersion: 1\nArchitecture: amd64\nMaintainer: x <x@example.org>\nDescription: fake\n",
			"usr/share/doc/x/note": "no kernel here\n",
		} {
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		deb := filepath.Join(t.TempDir(), "fake.deb")
		if out, err := exec.Command("dpkg-deb", "--build", "--root-owner-group", root, deb).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb --build: %v: %s", err, out)
		}
		_, err := Build(ctx, Options{CacheDir: cache, Deb: deb, Agent: "/nonexistent"})
		if err == nil || !strings.Contains(err.Error(), "no boot/vmlinuz-*") {
			t.Errorf("deb without vmlinuz: err = %v", err)
		}
	}

	// Option conflicts.
	for _, o := range []Options{
		{CacheDir: cache, Kernel: "/k"},
		{CacheDir: cache, ModulesDir: "/m"},
		{CacheDir: cache, Kernel: "/k", ModulesDir: "/m", Deb: "/d.deb"},
	} {
		if _, err := Build(ctx, o); err == nil || !strings.HasPrefix(err.Error(), "guest: ") {
			t.Errorf("Build(%+v) err = %v", o, err)
		}
	}

	// A fake kernel tree: missing module, then a dynamically linked agent.
	mods := filepath.Join(t.TempDir(), "lib", "modules", "6.1.0-test")
	writeFakeTree(t, mods, map[string]string{"a.ko": ""})
	kernel := filepath.Join(t.TempDir(), "bzImage")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(ctx, Options{CacheDir: cache, Kernel: kernel, ModulesDir: mods, Modules: []string{"a", "virtio_blk"}})
	if err == nil || !strings.Contains(err.Error(), `module "virtio_blk" not found`) || !strings.Contains(err.Error(), "6.1.0-test") {
		t.Errorf("missing module: err = %v", err)
	}
	dynamic, err := exec.LookPath("ls") // any dynamically linked system binary
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(ctx, Options{CacheDir: cache, Kernel: kernel, ModulesDir: mods, Modules: []string{"a"}, Agent: dynamic})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic agent: err = %v", err)
	}
	notELF := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Build(ctx, Options{CacheDir: cache, Kernel: kernel, ModulesDir: mods, Modules: []string{"a"}, Agent: notELF})
	if err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("script agent: err = %v", err)
	}
}

// TestBuildFakeTree builds a complete image from a fake kernel and module
// tree, without the network: the hermetic version of TestBuildRealDeb.
func TestBuildFakeTree(t *testing.T) {
	t.Parallel()
	mods := filepath.Join(t.TempDir(), "6.1.0-test")
	writeFakeTree(t, mods, map[string]string{"a.ko": "b", "b.ko": ""})
	kernel := filepath.Join(t.TempDir(), "bzImage")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := stubAgent(t)
	o := Options{CacheDir: t.TempDir(), Kernel: kernel, ModulesDir: mods, Modules: []string{"a"}, Agent: agent, Log: zaptest.NewLogger(t)}
	img, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if img.Cached || img.KernelVersion != "6.1.0-test" || !reflect.DeepEqual(img.Modules, []string{"b", "a"}) {
		t.Errorf("image = %+v", img)
	}
	checkInitramfs(t, mustRead(t, img.Initramfs), mustRead(t, agent), img.Modules, img.Lazy)
	again, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || again.Key != img.Key {
		t.Errorf("rebuild = %+v, want cached %s", again, img.Key)
	}
	// Changing the kernel changes the key.
	if err := os.WriteFile(kernel, []byte("kernel2"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Cached || changed.Key == img.Key {
		t.Errorf("kernel change: %+v", changed)
	}
}

func TestDownloadUnknownPackage(t *testing.T) {
	t.Parallel()
	if _, err := hosttool.Look("apt-get"); err != nil {
		t.Skipf("skipping: %v", err)
	}
	_, err := downloadKernel(context.Background(), zaptest.NewLogger(t), "", "linux-image-0.0.0-nonesuch-cloud-amd64", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "guest: apt-get download linux-image-0.0.0-nonesuch-cloud-amd64: ") || !strings.Contains(err.Error(), "run apt-get update") {
		t.Errorf("err = %v", err)
	}
}

// TestDownloadMemo checks that a second download asks apt nothing: the
// answer is remembered for the current package lists.
func TestDownloadMemo(t *testing.T) {
	deb := realDeb(t)
	debs := filepath.Dir(deb)
	memo, err := aptMemoPath(debs, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if memo == "" {
		t.Skipf("skipping: %s unreadable, nothing to key the memo on", aptListsDir)
	}
	got, ok := readAptMemo(memo, debs)
	if !ok || got != deb {
		t.Fatalf("readAptMemo = %q, %v; want %q", got, ok, deb)
	}
	again, err := downloadKernel(context.Background(), zaptest.NewLogger(t), "", "", filepath.Dir(debs))
	if err != nil || again != deb {
		t.Errorf("downloadKernel again = %q, %v; want %q", again, err, deb)
	}
	// Another package name is another memo.
	other, err := aptMemoPath(debs, "", "linux-image-other-cloud-amd64")
	if err != nil || other == memo {
		t.Errorf("memo for another package = %q, %v", other, err)
	}
}

func TestParsePrintURIs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    aptURI
		wantErr bool
	}{
		{in: "'http://deb.debian.org/debian/pool/l/linux-image-6.1.0-57-cloud-amd64_6.1.192-3_amd64.deb' linux-image-6.1.0-57-cloud-amd64_6.1.192-3_amd64.deb 26705532 SHA256:4FDD01\n",
			want: aptURI{File: "linux-image-6.1.0-57-cloud-amd64_6.1.192-3_amd64.deb", Size: 26705532, SHA256: "4fdd01"}},
		{in: "'u' x.deb 10\n", want: aptURI{File: "x.deb", Size: 10}},
		{in: "", wantErr: true},
		{in: "'u' ../x.deb 10 SHA256:00\n", wantErr: true},
		{in: "'u' x.deb ten SHA256:00\n", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parsePrintURIs([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parsePrintURIs(%q) = %+v, %v; want %+v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestSourceDir(t *testing.T) {
	dir, err := SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	ok, err := isModuleRoot(dir)
	if err != nil || !ok {
		t.Fatalf("SourceDir() = %s, not the module root (%v)", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "guest", "doc.go")); err != nil {
		t.Errorf("SourceDir() = %s: %v", dir, err)
	}
	t.Setenv("THEMIS_SOURCE_DIR", t.TempDir())
	if _, err := SourceDir(); err == nil || !strings.Contains(err.Error(), "THEMIS_SOURCE_DIR") {
		t.Errorf("bad THEMIS_SOURCE_DIR: err = %v", err)
	}
}

// TestBuildDefaultAgent builds cmd/themis-agent the way Build does by default.
func TestBuildDefaultAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: compiles cmd/themis-agent")
	}
	dir, err := SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	if files, err := filepath.Glob(filepath.Join(dir, "cmd", "themis-agent", "*.go")); err != nil || len(files) == 0 {
		t.Skip("skipping: cmd/themis-agent has no Go files yet")
	}
	b, err := buildAgent(context.Background(), zaptest.NewLogger(t), t.TempDir(), agentPackage)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAgent(b, "cmd/themis-agent"); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	want := t.TempDir()
	t.Setenv("THEMIS_CACHE_DIR", want)
	got, err := DefaultCacheDir()
	if err != nil || got != want {
		t.Errorf("DefaultCacheDir() = %q, %v; want %q", got, err, want)
	}
	t.Setenv("THEMIS_CACHE_DIR", "")
	got, err = DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(got) != "themis" {
		t.Errorf("DefaultCacheDir() = %q", got)
	}
}

// TestOpenPrebuilt: an image directory opens as the image Build made;
// damaged or foreign directories are refused with the reason, and
// THEMIS_GUEST_IMAGE makes Build return it without building.
func TestOpenPrebuilt(t *testing.T) {
	dir := t.TempDir()
	key := "00ff"
	m := manifest{Format: imageFormat, Key: key, KernelVersion: "6.1.0-test", Modules: []string{"virtio_blk"},
		Kernel: entryOf([]byte("kernel")), Initramfs: entryOf([]byte("initramfs"))}
	mj, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{KernelFile: "kernel", InitramfsFile: "initramfs", ManifestFile: string(mj)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if img.Key != key || img.KernelVersion != "6.1.0-test" || img.Kernel != filepath.Join(dir, KernelFile) || !img.Cached {
		t.Errorf("Open = %+v", img)
	}
	t.Setenv(PrebuiltEnv, dir)
	got, err := Build(context.Background(), Options{CacheDir: t.TempDir()})
	if err != nil || got.Key != key {
		t.Fatalf("Build with $%s: %+v, %v; want the prebuilt image", PrebuiltEnv, got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, KernelFile), []byte("truncated"[:3]), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, dir, want string }{
		{"size mismatch", dir, "manifest says"},
		{"missing", filepath.Join(dir, "nope"), "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(tt.dir); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%s) = %v, want an error containing %q", tt.dir, err, tt.want)
			}
		})
	}
	if _, err := Build(context.Background(), Options{CacheDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), PrebuiltEnv) {
		t.Errorf("Build with a damaged $%s: %v, want an error naming it", PrebuiltEnv, err)
	}
}

// writeImageDir writes an image directory with a manifest of key, kernel
// version and flavour, and returns it.
func writeImageDir(t *testing.T, key, kernelVersion, flavor string) string {
	t.Helper()
	dir := t.TempDir()
	m := manifest{Format: imageFormat, Key: key, KernelVersion: kernelVersion, Flavor: flavor, Modules: []string{"virtio_blk"},
		Kernel: entryOf([]byte("kernel")), Initramfs: entryOf([]byte("initramfs"))}
	mj, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{KernelFile: "kernel", InitramfsFile: "initramfs", ManifestFile: string(mj)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPrebuiltFlavors: THEMIS_GUEST_IMAGE lists several images; a default
// request gets the first of its flavour (a cloud one also an image of a
// caller's kernel, or one whose manifest predates flavours), none when no
// listed image fits, and never for options other than the flavour.
func TestPrebuiltFlavors(t *testing.T) {
	cloud := writeImageDir(t, "c1", "6.1.0-57-cloud-amd64", "")
	generic := writeImageDir(t, "g1", "6.1.0-57-amd64", FlavorGeneric)
	custom := writeImageDir(t, "k1", "6.1.0-test", "custom")
	list := func(dirs ...string) string { return strings.Join(dirs, string(filepath.ListSeparator)) }
	for _, tt := range []struct {
		name, env string
		o         Options
		want      string // the key, "" for none
	}{
		{"cloud of two", list(cloud, generic), Options{}, "c1"},
		{"generic of two", list(cloud, generic), Options{Flavor: FlavorGeneric}, "g1"},
		{"generic listed first", list(generic, cloud), Options{Flavor: FlavorCloud}, "c1"},
		{"a caller's kernel answers cloud", list(generic, custom), Options{}, "k1"},
		{"no generic listed", list(cloud, custom), Options{Flavor: FlavorGeneric}, ""},
		{"no cloud listed", generic, Options{}, ""},
		{"empty entries skipped", list("", generic), Options{Flavor: FlavorGeneric}, "g1"},
		{"not a default request", list(cloud, generic), Options{Flavor: FlavorGeneric, Modules: []string{"f2fs"}}, ""},
		{"unset", "", Options{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(PrebuiltEnv, tt.env)
			img, err := prebuilt(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if img != nil {
				got = img.Key
			}
			if got != tt.want {
				t.Errorf("prebuilt(%+v) with %q = %q, want %q", tt.o, tt.env, got, tt.want)
			}
		})
	}
	t.Setenv(PrebuiltEnv, list(generic, filepath.Join(cloud, "nope")))
	if _, err := prebuilt(Options{}); err == nil || !strings.Contains(err.Error(), PrebuiltEnv) {
		t.Errorf("a listed directory that does not open: %v, want an error naming $%s", err, PrebuiltEnv)
	}
	t.Setenv(PrebuiltEnv, list(cloud, generic))
	if img, err := Build(context.Background(), Options{CacheDir: t.TempDir(), Flavor: FlavorGeneric}); err != nil || img.Key != "g1" || img.Flavor != FlavorGeneric {
		t.Errorf("Build of the generic flavour with both listed: %+v, %v; want the generic image", img, err)
	}
}
