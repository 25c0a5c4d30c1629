package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/guest"
)

func newGuest(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "guest", Short: "Build and inspect the guest image"}
	var o guest.Options
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the guest image (kernel + modules + agent initramfs), cached by content hash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			o.CacheDir, o.Log = cache, g.log
			img, err := guest.Build(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.json {
				return writeJSON(os.Stdout, img)
			}
			state := "built"
			if img.Cached {
				state = "unchanged (cached)"
			}
			fmt.Printf("guest image %s: %s\n  kernel    %s (%s)\n  initramfs %s\n  modules   %v\n", img.Key, state, img.Kernel, img.KernelVersion, img.Initramfs, img.Modules)
			return nil
		},
	}
	build.Flags().StringVar(&o.Deb, "deb", "", "a linux-image .deb to use instead of apt-get download")
	build.Flags().StringVar(&o.Flavor, "flavor", guest.FlavorCloud, "kernel flavour: cloud (Debian's cloud kernel) or generic (the generic kernel, with f2fs, nilfs2, jfs and minix; lanes of those boot it themselves)")
	build.Flags().StringVar(&o.KernelPackage, "kernel-package", "", "Debian package to download (default: what linux-image-cloud-amd64, or linux-image-amd64 for --flavor generic, depends on)")
	build.Flags().StringVar(&o.Kernel, "kernel", "", "a kernel image (bzImage) instead of a .deb (with --modules-dir)")
	build.Flags().StringVar(&o.ModulesDir, "modules-dir", "", "the kernel's module directory (lib/modules/<version>)")
	build.Flags().StringVar(&o.Agent, "agent", "", "a prebuilt static agent binary (default: go build ./cmd/themis-agent)")
	cmd.AddCommand(build)
	return cmd
}
