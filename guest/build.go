package guest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"
)

// imageFormat versions the image layout and the cache key. Change it when
// the initramfs contents or the manifest change meaning.
const imageFormat = "themis-guest-image/v1"

// File names inside an image directory.
const (
	KernelFile    = "vmlinuz"
	InitramfsFile = "initramfs.cpio"
	ManifestFile  = "manifest.json"
)

// Options configures Build. The zero value builds the default guest: the
// current Debian cloud kernel, DefaultModules and the agent compiled from
// this source tree.
type Options struct {
	// CacheDir holds downloads, unpacked kernels, images and base images.
	// Default: DefaultCacheDir().
	CacheDir string
	// Deb is a linux-image .deb to use instead of downloading one.
	Deb string
	// Flavor is the kernel flavour, FlavorCloud ("" too) or FlavorGeneric:
	// which metapackage names the kernel, and the default modules
	// (DefaultModulesFor).
	Flavor string
	// KernelPackage is the package to `apt-get download`. Default: the
	// linux-image-*[-cloud]-amd64 the flavour's metapackage depends on.
	KernelPackage string
	// Kernel is a kernel image (bzImage) to use instead of a package;
	// ModulesDir must then be its module tree (lib/modules/<version>),
	// whose base name is taken as the kernel version.
	Kernel     string
	ModulesDir string
	// Modules are the module names to load; '-' and '_' are equal and
	// dependencies are added automatically. Default: DefaultModulesFor
	// the flavour.
	Modules []string
	// Agent is a prebuilt static agent binary. Default: build
	// InitPackage from the source tree (see SourceDir) with
	// CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'.
	Agent string
	// InitPackage is the package built as /init when Agent is empty,
	// relative to the source root. Default: "./cmd/themis-agent" (the
	// emulated AMD-V host of internal/nested builds its own init).
	InitPackage string
	// Patches are kernel patches (unified diffs, applied with patch -p1)
	// to the Debian source of the kernel (linux-source-<x.y>, which must
	// match the kernel package): the modules of the fs/<dir> directories
	// they touch are built out of tree against linux-headers-<version>,
	// stripped, and packed in place of the stock ones (docs/fs-under-test.md).
	Patches []string
	// ModuleSrcs are module source directories (a developer's fs/udf),
	// built like the patched directories.
	ModuleSrcs []string
	// KernelTree is a developer's built kernel tree, instead of a package
	// or Kernel: arch/x86/boot/bzImage, its release from
	// include/config/kernel.release, modules from ModulesDir (checked
	// against the release), <tree>/lib/modules/<release> or the tree.
	KernelTree string
	// HeadersDir is the tree modules are built against. Default: the
	// kernel tree, else /usr/src/linux-headers-<kernel version>.
	HeadersDir string
	// KernelSource is the kernel source tarball patches apply to. Default:
	// /usr/src/linux-source-<x.y>.tar.xz.
	KernelSource string
	// Name names the built image in the cache (NameGrammar), so that
	// Resolve finds it by name.
	Name string
	// Log receives progress; nil means zap.NewNop().
	Log *zap.Logger
}

// custom says whether o builds modules.
func (o Options) custom() bool { return len(o.Patches) > 0 || len(o.ModuleSrcs) > 0 }

// flavorName is what the manifest records as o's flavour: "custom" for a
// caller's kernel.
func (o Options) flavorName() string {
	if o.Kernel != "" || o.KernelTree != "" {
		return FlavorCustom
	}
	name, _, _ := flavorOf(o.Flavor)
	return name
}

// Image is a built guest image.
type Image struct {
	Kernel        string   // absolute path of the kernel image (bzImage) in the cache
	Initramfs     string   // absolute path of the uncompressed newc initramfs in the cache
	KernelVersion string   // e.g. "6.1.0-57-cloud-amd64"
	Modules       []string // module names in load order, as packed ("virtio_ring", ...)
	Lazy          []string // those of Modules loaded on first need (/modules/lazy), not at boot
	Key           string   // hex blake3 content hash; the image lives in <cache>/images/<Key>
	Cached        bool     // true when nothing was rebuilt
	Flavor        string   // FlavorCloud, FlavorGeneric or "custom"; "" in images built before it was recorded
	Patches       []Input  // the patches applied, in order
	Sources       []Input  // the module source directories built
	Built         []string // the modules built from Patches and Sources, sorted
}

// manifest is <cache>/images/<key>/manifest.json.
type manifest struct {
	Format        string    `json:"format"`
	Key           string    `json:"key"`
	KernelVersion string    `json:"kernel_version"`
	KernelSource  string    `json:"kernel_source,omitempty"` // .deb base name
	Modules       []string  `json:"modules"`
	Kernel        fileEntry `json:"kernel"`
	Initramfs     fileEntry `json:"initramfs"`
	Agent         fileEntry `json:"agent"`
	Flavor        string    `json:"flavor,omitempty"`
	Patches       []Input   `json:"patches,omitempty"`
	Sources       []Input   `json:"module_sources,omitempty"`
	Built         []string  `json:"built_modules,omitempty"`
}

type fileEntry struct {
	Size   int64  `json:"size"`
	BLAKE3 string `json:"blake3"`
}

func entryOf(b []byte) fileEntry {
	sum := blake3.Sum256(b)
	return fileEntry{Size: int64(len(b)), BLAKE3: hex.EncodeToString(sum[:])}
}

// DefaultCacheDir returns $THEMIS_CACHE_DIR if set, else
// os.UserCacheDir()/themis.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("THEMIS_CACHE_DIR"); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("guest: cache directory: %w; set THEMIS_CACHE_DIR", err)
	}
	return filepath.Join(d, "themis"), nil
}

// CacheDir returns the cache directory dir names: DefaultCacheDir() for
// "", else dir made absolute.
func CacheDir(dir string) (string, error) {
	if dir == "" {
		return DefaultCacheDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("guest: cache directory: %w", err)
	}
	return abs, nil
}

// Build makes (or finds in the cache) the guest image described by o.
func Build(ctx context.Context, o Options) (*Image, error) {
	start := time.Now()
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("guest")
	if _, _, err := flavorOf(o.Flavor); err != nil {
		return nil, err
	}
	if o.Name != "" {
		if err := CheckName(o.Name); err != nil {
			return nil, err
		}
	}
	var inputs *modBuild // read first: a bad patch fails before any download
	if o.custom() {
		var err error
		if inputs, err = readBuildInputs(o); err != nil {
			return nil, err
		}
	}
	if img, err := prebuilt(o); err != nil || img != nil {
		if img != nil {
			log.Info("prebuilt guest image at "+img.Key, zap.String("dir", filepath.Dir(img.Kernel)))
		}
		return img, err
	}
	cacheDir, err := CacheDir(o.CacheDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	c, err := loadKernelAndModules(ctx, log, o, cacheDir, inputs)
	if err != nil {
		return nil, err
	}
	if c.agent, err = loadAgent(ctx, log, o, cacheDir); err != nil {
		return nil, err
	}

	key := imageKey(c.kernel, c.mods, c.agent, c.inputs())
	images := filepath.Join(cacheDir, "images")
	dir := filepath.Join(images, key)
	img := c.image(key, dir)
	img.Flavor = o.flavorName()
	ok, err := checkImageDir(dir, key)
	if ok {
		img.Cached = true
		if err := c.keepPatches(dir); err != nil {
			return nil, err
		}
		if err := nameImage(cacheDir, o.Name, key); err != nil {
			return nil, err
		}
		log.Info("guest image unchanged, cached at "+dir,
			zap.String("kernel_version", c.kt.Version), zap.Duration("took", time.Since(start)))
		return img, nil
	}
	if err != nil {
		log.Warn("guest image cache entry invalid; rebuilding", zap.String("dir", dir), zap.Error(err))
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("guest: remove invalid cache entry: %w", err)
		}
	}
	initramfsBytes, err := c.writeImageDir(images, dir, img)
	if err != nil {
		return nil, err
	}
	log.Info("guest image built",
		zap.String("dir", dir),
		zap.String("kernel_version", c.kt.Version),
		zap.Strings("modules", img.Modules),
		zap.Int("kernel_bytes", len(c.kernel)),
		zap.Int("initramfs_bytes", initramfsBytes),
		zap.Duration("took", time.Since(start)))
	if err := nameImage(cacheDir, o.Name, key); err != nil {
		return nil, err
	}
	return img, nil
}

// imageContents are the inputs an image is made of: the kernel tree, the
// kernel image's bytes, the modules in load order and the agent binary.
type imageContents struct {
	kt     *kernelTree
	kernel []byte
	mods   []*module
	agent  []byte
	built  *builtModules // nil without patches or module sources
}

// inputs lists what beyond its contents an image's key covers: the
// patches and module sources its modules were built from.
func (c *imageContents) inputs() []string {
	if c.built == nil {
		return nil
	}
	var in []string
	for _, p := range c.built.Patches {
		in = append(in, "patch:"+p.BLAKE3)
	}
	for _, s := range c.built.Sources {
		in = append(in, "src:"+s.BLAKE3)
	}
	return in
}

// loadKernelAndModules resolves o's kernel, reads its image, builds the
// modules of inputs (nil: none) and resolves o's modules (DefaultModules
// when none) in load order, marking lazy those the boot set does not need.
func loadKernelAndModules(ctx context.Context, log *zap.Logger, o Options, cacheDir string, inputs *modBuild) (*imageContents, error) {
	kt, err := resolveKernel(ctx, log, o, cacheDir)
	if err != nil {
		return nil, err
	}
	kernel, err := os.ReadFile(kt.Kernel)
	if err != nil {
		return nil, fmt.Errorf("guest: read kernel: %w", err)
	}
	idx, err := indexModules(kt.ModulesDir)
	if err != nil {
		return nil, err
	}
	wanted := o.Modules
	if len(wanted) == 0 {
		wanted = DefaultModulesFor(o.Flavor)
	}
	var built *builtModules
	if inputs != nil {
		if built, err = buildModules(ctx, log, o, cacheDir, kt, idx, inputs); err != nil {
			return nil, err
		}
		idx.override = built.Data
		wanted = withBuilt(wanted, built.Names())
	}
	mods, err := resolveModules(ctx, idx, wanted)
	if err != nil {
		return nil, fmt.Errorf("%w (kernel %s)", err, kt.Version)
	}
	if bootWanted := withoutLazy(wanted); len(bootWanted) < len(wanted) {
		boot, err := resolveModules(ctx, idx, bootWanted)
		if err != nil {
			return nil, fmt.Errorf("%w (kernel %s)", err, kt.Version)
		}
		markLazy(mods, boot)
	}
	return &imageContents{kt: kt, kernel: kernel, mods: mods, built: built}, nil
}

// loadAgent reads o.Agent, or builds o.InitPackage (the agent package by
// default), and checks the binary is one the guest can run as init.
func loadAgent(ctx context.Context, log *zap.Logger, o Options, cacheDir string) ([]byte, error) {
	var agent []byte
	var err error
	agentName := o.Agent
	if o.Agent != "" {
		if agent, err = os.ReadFile(o.Agent); err != nil {
			return nil, fmt.Errorf("guest: read agent: %w", err)
		}
	} else {
		agentName = o.InitPackage
		if agentName == "" {
			agentName = agentPackage
		}
		if agent, err = buildAgent(ctx, log, cacheDir, agentName); err != nil {
			return nil, err
		}
	}
	if err := checkAgent(agent, agentName); err != nil {
		return nil, err
	}
	return agent, nil
}

// image describes the image of these contents with cache key key, stored
// in dir.
func (c *imageContents) image(key, dir string) *Image {
	img := &Image{KernelVersion: c.kt.Version, Key: key}
	if c.built != nil {
		img.Patches, img.Sources, img.Built = c.built.Patches, c.built.Sources, c.built.Names()
	}
	for _, m := range c.mods {
		img.Modules = append(img.Modules, m.Name)
		if m.Lazy {
			img.Lazy = append(img.Lazy, m.Name)
		}
	}
	img.Kernel = filepath.Join(dir, KernelFile)
	img.Initramfs = filepath.Join(dir, InitramfsFile)
	return img
}

// writeImageDir writes img's kernel, initramfs and manifest into a
// temporary directory under images, each synced, the manifest last, and
// renames it to dir. It returns the initramfs size in bytes.
func (c *imageContents) writeImageDir(images, dir string, img *Image) (int, error) {
	var initramfs bytes.Buffer
	if err := writeInitramfs(&initramfs, c.mods, c.agent); err != nil {
		return 0, err
	}
	m := manifest{
		Format:        imageFormat,
		Key:           img.Key,
		KernelVersion: c.kt.Version,
		Modules:       img.Modules,
		Kernel:        entryOf(c.kernel),
		Initramfs:     entryOf(initramfs.Bytes()),
		Agent:         entryOf(c.agent),
		Flavor:        img.Flavor,
		Patches:       img.Patches,
		Sources:       img.Sources,
		Built:         img.Built,
	}
	if c.kt.Source != "" {
		m.KernelSource = filepath.Base(c.kt.Source)
	}
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return 0, fmt.Errorf("guest: manifest: %w", err)
	}
	if err := os.MkdirAll(images, 0o755); err != nil {
		return 0, fmt.Errorf("guest: %w", err)
	}
	tmp, err := os.MkdirTemp(images, ".build-")
	if err != nil {
		return 0, fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename
	if err := c.writePatches(tmp); err != nil {
		return 0, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{KernelFile, c.kernel},
		{InitramfsFile, initramfs.Bytes()},
		{ManifestFile, append(mj, '\n')}, // last: a manifest means the rest is there
	} {
		if err := writeFileSync(filepath.Join(tmp, f.name), f.data, 0o644); err != nil {
			return 0, err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return 0, fmt.Errorf("guest: %w", err)
	}
	if err := renameDir(tmp, dir); err != nil {
		return 0, err
	}
	return initramfs.Len(), nil
}

// writePatches keeps a copy of each patch the image was built from in
// dir's PatchesDir (Image.PatchFile), for an exported finding to carry.
func (c *imageContents) writePatches(dir string) error {
	if c.built == nil || len(c.built.PatchData) == 0 {
		return nil
	}
	pd := filepath.Join(dir, PatchesDir)
	if err := os.Mkdir(pd, 0o755); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	for i, data := range c.built.PatchData {
		if err := writeFileSync(filepath.Join(pd, patchFileName(i)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// keepPatches adds the copy of the patches to a cached image built before
// images kept them (writePatches): into a temporary directory beside, then
// renamed into place.
func (c *imageContents) keepPatches(dir string) error {
	if c.built == nil || len(c.built.PatchData) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, PatchesDir)); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(dir, ".patches-")
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := c.writePatches(tmp); err != nil {
		return err
	}
	err = os.Rename(filepath.Join(tmp, PatchesDir), filepath.Join(dir, PatchesDir))
	if _, serr := os.Stat(filepath.Join(dir, PatchesDir)); err != nil && serr != nil {
		return fmt.Errorf("guest: %w", err)
	}
	return nil // renamed, or a concurrent build kept them first
}

// imageKey hashes everything that goes into an image. Every field is
// length-prefixed so that no two input lists hash alike.
func imageKey(kernel []byte, mods []*module, agent []byte, inputs []string) string {
	h := blake3.New()
	field := func(b []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:]) // blake3's Write never fails
		h.Write(b)
	}
	sum := func(b []byte) []byte { s := blake3.Sum256(b); return s[:] }
	field([]byte(imageFormat))
	field(sum(kernel))
	for _, m := range mods {
		field([]byte(m.Name))
		field(sum(m.Data))
		if m.Lazy {
			field([]byte("lazy"))
			for _, f := range m.For {
				field([]byte("lazy." + f))
			}
		}
	}
	field([]byte("agent"))
	field(sum(agent))
	for _, in := range inputs { // none for a stock image, whose key stays as it was
		field([]byte(in))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkImageDir looks for a cached image: ok is false with a nil error when
// there is no entry, and the error says what is wrong with a damaged one.
func checkImageDir(dir, key string) (ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return false, nil
		}
		return false, errors.New("no manifest")
	}
	if err != nil {
		return false, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return false, fmt.Errorf("manifest: %w", err)
	}
	if m.Format != imageFormat || m.Key != key {
		return false, fmt.Errorf("manifest is for format %q key %s, want %q %s", m.Format, m.Key, imageFormat, key)
	}
	for _, f := range []struct {
		name string
		size int64
	}{{KernelFile, m.Kernel.Size}, {InitramfsFile, m.Initramfs.Size}} {
		st, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil {
			return false, err
		}
		if st.Size() != f.size {
			return false, fmt.Errorf("%s is %d bytes, manifest says %d", f.name, st.Size(), f.size)
		}
	}
	return true, nil
}

// writeInitramfs writes the guest's newc archive.
func writeInitramfs(w io.Writer, mods []*module, agent []byte) error {
	a := newCPIOArchive()
	for _, d := range []string{"dev", "proc", "sys", "lanes", "tmp", "mnt", "modules"} {
		perm := fs.FileMode(0o755)
		if d == "tmp" {
			perm = fs.ModeSticky | 0o777
		}
		if err := a.Dir(d, perm); err != nil {
			return err
		}
	}
	if err := a.CharDev("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := a.File("init", 0o755, agent); err != nil {
		return err
	}
	var order, lazy bytes.Buffer
	lazyFor := make(map[string]*bytes.Buffer)
	var roots []string
	for _, m := range mods {
		if err := a.File("modules/"+m.FileName(), 0o644, m.Data); err != nil {
			return err
		}
		if !m.Lazy {
			order.WriteString(m.FileName() + "\n")
			continue
		}
		lazy.WriteString(m.FileName() + "\n")
		for _, f := range m.For {
			if lazyFor[f] == nil {
				lazyFor[f] = new(bytes.Buffer)
				roots = append(roots, f)
			}
			lazyFor[f].WriteString(m.FileName() + "\n")
		}
	}
	sort.Strings(roots)
	for _, f := range roots {
		if err := a.File("modules/lazy."+f, 0o644, lazyFor[f].Bytes()); err != nil {
			return err
		}
	}
	if err := a.File("modules/order", 0o644, order.Bytes()); err != nil {
		return err
	}
	if lazy.Len() > 0 {
		if err := a.File("modules/lazy", 0o644, lazy.Bytes()); err != nil {
			return err
		}
	}
	if _, err := a.WriteTo(w); err != nil {
		return fmt.Errorf("guest: initramfs: %w", err)
	}
	return nil
}

// writeFileSync writes and fsyncs a file.
func writeFileSync(p string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("guest: write %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("guest: sync %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("guest: close %s: %w", p, err)
	}
	return nil
}
