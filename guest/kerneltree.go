package guest

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/themisfs/themis/internal/hosttool"
)

// resolveKernelTree finds the kernel image and modules of a developer's
// built kernel tree: arch/x86/boot/bzImage, the release in
// include/config/kernel.release (which the bzImage's own version string
// and the modules directory's name must match), and the modules from
// o.ModulesDir, the tree's lib/modules/<release> (make modules_install
// INSTALL_MOD_PATH=<tree>), or the tree itself.
func resolveKernelTree(o Options) (*kernelTree, error) {
	if o.Kernel != "" || o.Deb != "" || o.KernelPackage != "" {
		return nil, errors.New("guest: --kernel-tree replaces --kernel, --deb and --kernel-package: set one of them")
	}
	tree, err := filepath.Abs(o.KernelTree)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	b, err := readBoundedFile(filepath.Join(tree, "include", "config", "kernel.release"), 256)
	if err != nil {
		return nil, fmt.Errorf("guest: kernel tree %s: %w (a built tree has it: run make)", tree, err)
	}
	rel := strings.TrimSpace(string(b))
	if rel == "" || strings.ContainsAny(rel, "/ \t\n") {
		return nil, fmt.Errorf("guest: kernel tree %s: bad include/config/kernel.release %q", tree, rel)
	}
	kernel := filepath.Join(tree, "arch", "x86", "boot", "bzImage")
	img, err := readBoundedFile(kernel, 256<<20)
	if err != nil {
		return nil, fmt.Errorf("guest: kernel tree %s: %w (build it: make bzImage modules)", tree, err)
	}
	if v, err := bzImageVersion(img); err != nil {
		return nil, fmt.Errorf("guest: %s: %w", kernel, err)
	} else if v != rel {
		return nil, fmt.Errorf("guest: %s is kernel %s but include/config/kernel.release says %s: rebuild the tree (make bzImage)", kernel, v, rel)
	}
	mods := o.ModulesDir
	switch {
	case mods != "":
		if filepath.Base(filepath.Clean(mods)) != rel {
			return nil, fmt.Errorf("guest: modules directory %s is not for kernel %s (want .../lib/modules/%s)", mods, rel, rel)
		}
	default:
		mods = filepath.Join(tree, "lib", "modules", rel)
		if _, err := os.Stat(mods); err != nil {
			mods = tree // the modules where the build left them
		}
	}
	if mods, err = filepath.Abs(mods); err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	return &kernelTree{Kernel: kernel, ModulesDir: mods, Version: rel}, nil
}

// bzImageVersion reads the release from a bzImage's version string (the
// setup header's kernel_version field: "6.1.0-57-cloud-amd64 (builder@host) #1 ...").
func bzImageVersion(img []byte) (string, error) {
	if len(img) < 0x210 || string(img[0x202:0x206]) != "HdrS" {
		return "", errors.New("not a bzImage (no HdrS setup header)")
	}
	off := int(binary.LittleEndian.Uint16(img[0x20e:])) + 0x200
	if off >= len(img) {
		return "", errors.New("bzImage version string out of range")
	}
	s := img[off:min(off+256, len(img))]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Fields(string(s))
	if len(f) == 0 {
		return "", errors.New("bzImage has an empty version string")
	}
	return f[0], nil
}

// stripIfDebug strips a module that carries debug info (one from a
// developer's tree; Debian's are stripped), which would swell the
// initramfs past guest RAM.
func stripIfDebug(ctx context.Context, data []byte, name string) ([]byte, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil || f.Section(".debug_info") == nil {
		return data, nil // modinfo reports a bad ELF with its context
	}
	dir, err := os.MkdirTemp("", "themis-strip-")
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "in.ko")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	if _, err := hosttool.Run(ctx, "", "strip", "--strip-debug", in); err != nil {
		return nil, fmt.Errorf("guest: strip module %s: %w", name, err)
	}
	out, err := os.ReadFile(in)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	return out, nil
}
