package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// PrebuiltEnv names built image directories (<cache>/images/<key>,
// several separated by ':') that Build returns as they are when called with
// default options (a flavour aside), instead of resolving a kernel and
// compiling the agent: the first listed image of the flavour asked for
// (a cloud request also takes an image of a caller's kernel, as it did
// before flavours were recorded). For hosts that run guests but cannot
// build them: the emulated AMD-V host of internal/nested has no Go
// toolchain and no package mirror.
const PrebuiltEnv = "THEMIS_GUEST_IMAGE"

// maxManifest bounds the manifest Open reads.
const maxManifest = 1 << 20

// isDefault says whether o asks for a stock image of its flavour (any
// cache dir): the only request a prebuilt image can answer.
func (o Options) isDefault() bool {
	return o.Deb == "" && o.KernelPackage == "" && o.Kernel == "" && o.ModulesDir == "" &&
		len(o.Modules) == 0 && o.Agent == "" && o.InitPackage == "" &&
		!o.custom() && o.KernelTree == "" && o.Name == ""
}

// prebuilt returns the image $PrebuiltEnv lists for o, or nil when o is
// not a default request or no listed image is of its flavour. A listed
// directory that does not open is an error naming the variable.
func prebuilt(o Options) (*Image, error) {
	list := os.Getenv(PrebuiltEnv)
	if list == "" || !o.isDefault() {
		return nil, nil
	}
	want := FlavorName(o.Flavor)
	for _, dir := range filepath.SplitList(list) {
		if dir == "" {
			continue
		}
		img, err := Open(dir)
		if err != nil {
			return nil, fmt.Errorf("guest: $%s: %w", PrebuiltEnv, err)
		}
		f := img.Flavor
		if f == "" {
			f = flavorOfRelease(img.KernelVersion)
		}
		if f == want || (want == FlavorCloud && f == FlavorCustom) {
			return img, nil
		}
	}
	return nil, nil
}

// Open returns the image built earlier in dir (an images/<key> directory
// of a cache), after checking its manifest against the files there.
func Open(dir string) (*Image, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("guest: image %s: %w", dir, err)
	}
	b, err := readBoundedFile(filepath.Join(abs, ManifestFile), maxManifest)
	if err != nil {
		return nil, fmt.Errorf("guest: image %s: %w", dir, err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("guest: image %s: manifest: %w", dir, err)
	}
	if ok, err := checkImageDir(abs, m.Key); !ok {
		if err == nil {
			err = fmt.Errorf("no image")
		}
		return nil, fmt.Errorf("guest: image %s: %w", dir, err)
	}
	return &Image{
		Kernel:        filepath.Join(abs, KernelFile),
		Initramfs:     filepath.Join(abs, InitramfsFile),
		KernelVersion: m.KernelVersion,
		Modules:       m.Modules,
		Key:           m.Key,
		Cached:        true,
		Flavor:        m.Flavor,
		Patches:       m.Patches,
		Sources:       m.Sources,
		Built:         m.Built,
	}, nil
}

// readBoundedFile reads p, refusing a file larger than max bytes.
func readBoundedFile(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", p, max)
	}
	return b, nil
}
