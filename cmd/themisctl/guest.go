package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/guestproto"
)

func newGuest(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "guest", Short: "Build and inspect the guest image"}
	cmd.AddCommand(newGuestBuild(g), newGuestList(g))
	return cmd
}

func newGuestBuild(g *globals) *cobra.Command {
	var o guest.Options
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the guest image (kernel + modules + agent initramfs), cached by content hash",
		Long: `Build the guest image (kernel + modules + agent initramfs), cached by content hash.

--patch FILE (repeatable) applies a kernel patch to the Debian source of the guest
kernel (package linux-source-<x.y>), builds the modules of the fs/<dir> directories it
touches against linux-headers-<kernel version>, and packs them in place of the stock
ones; --module-src DIR builds a module source directory the same way; --kernel-tree DIR
boots a developer's built kernel tree. --name NAME names the image for --image NAME
(docs/fs-under-test.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			if o.Name != "" {
				if err := guest.CheckName(o.Name); err != nil {
					return err
				}
			}
			o.CacheDir, o.Log = cache, g.log
			img, err := guest.Build(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.json {
				m := guestproto.Image(img)
				if o.Name != "" {
					m.Names = []string{o.Name}
				}
				return writeProtoJSON(m)
			}
			printImage(img, o.Name)
			return nil
		},
	}
	f := build.Flags()
	f.StringVar(&o.Deb, "deb", "", "a linux-image .deb to use instead of apt-get download")
	f.StringVar(&o.Flavor, "flavor", guest.FlavorCloud, "kernel flavour: cloud (Debian's cloud kernel) or generic (the generic kernel, with f2fs, nilfs2, jfs and minix, and ext4 as a module; lanes of those boot it themselves)")
	f.StringVar(&o.KernelPackage, "kernel-package", "", "Debian package to download (default: what linux-image-cloud-amd64, or linux-image-amd64 for --flavor generic, depends on)")
	f.StringVar(&o.Kernel, "kernel", "", "a kernel image (bzImage) instead of a .deb (with --modules-dir)")
	f.StringVar(&o.ModulesDir, "modules-dir", "", "the kernel's module directory (lib/modules/<version>)")
	f.StringVar(&o.Agent, "agent", "", "a prebuilt static agent binary (default: go build ./cmd/themis-agent)")
	f.StringArrayVar(&o.Patches, "patch", nil, "a kernel patch (unified diff, -p1, touching fs/<dir>/ only) to build the filesystem's module from (repeatable; applied in order)")
	f.StringArrayVar(&o.ModuleSrcs, "module-src", nil, "a module source directory (kbuild Makefile, e.g. your fs/udf) to build against the kernel's headers (repeatable)")
	f.StringVar(&o.KernelTree, "kernel-tree", "", "a built kernel tree: arch/x86/boot/bzImage, include/config/kernel.release, modules from --modules-dir, <tree>/lib/modules/<release> or the tree")
	f.StringVar(&o.Name, "name", "", "name the image ([A-Za-z0-9._+-]{1,64}) for --image NAME and guest list")
	return build
}

// printImage prints a built image for people.
func printImage(img *guest.Image, name string) {
	state := "built"
	if img.Cached {
		state = "unchanged (cached)"
	}
	fmt.Printf("guest image %s: %s\n", img.Key, state)
	if name != "" {
		fmt.Printf("  name      %s\n", name)
	}
	fmt.Printf("  kernel    %s (%s, %s)\n  initramfs %s\n  modules   %v\n", img.Kernel, img.KernelVersion, img.Flavor, img.Initramfs, img.Modules)
	for _, p := range img.Patches {
		fmt.Printf("  patch     %s (blake3 %s)\n", p.Name, p.BLAKE3[:16])
	}
	for _, s := range img.Sources {
		fmt.Printf("  source    %s (blake3 %s)\n", s.Name, s.BLAKE3[:16])
	}
	if len(img.Built) > 0 {
		fmt.Printf("  built     %s\n", strings.Join(img.Built, ", "))
	}
}

func newGuestList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the cached guest images: key, names, kernel, flavour, patches, built time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			imgs, err := guest.List(cache)
			if err != nil {
				return err
			}
			if g.json {
				return writeProtoJSON(guestproto.List(imgs))
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "KEY\tNAME\tKERNEL\tFLAVOR\tPATCHES\tBUILT")
			for _, l := range imgs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Key[:16], dash(strings.Join(l.Names, ",")), l.KernelVersion,
					l.Flavor, dash(inputNames(l.Patches, l.Sources)), l.Built.Format("2006-01-02 15:04:05"))
			}
			return w.Flush()
		},
	}
}

// inputNames lists patches and module sources by name and short hash.
func inputNames(groups ...[]guest.Input) string {
	var s []string
	for _, g := range groups {
		for _, in := range g {
			s = append(s, in.Name+"@"+in.BLAKE3[:8])
		}
	}
	return strings.Join(s, ",")
}

// dash shows an empty cell as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
