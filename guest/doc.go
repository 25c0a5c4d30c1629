// Package guest builds the guest image Themis boots and the base images its
// lanes start from.
//
// # Guest image
//
// [Build] turns the Debian cloud kernel package (linux-image-*-cloud-amd64,
// fetched with `apt-get download`, or a .deb / kernel + module tree supplied
// by the caller) and the static agent binary (cmd/themis-agent) into two
// files: the kernel image (vmlinuz) and an uncompressed newc initramfs
// (initramfs.cpio). The initramfs holds:
//
//	/init                the agent, mode 0755
//	/modules/<name>.ko   every wanted module and its dependencies
//	/modules/order       one module file name per line ("virtio_ring.ko"),
//	                     dependencies first; the agent loads them in order
//	/modules/lazy        the same for LazyModules (btrfs) and what only they
//	                     need; the agent loads them when a mount first fails
//	                     with ENODEV
//	/dev/console         character device 5:1, so /init has a console
//	/dev /proc /sys /lanes /tmp /mnt
//
// The Debian package ships no modules.dep; dependencies come from the
// depends= field of each module's .modinfo ELF section.
//
// # Determinism and caching
//
// The initramfs is byte-for-byte a function of its inputs (mtimes 0, uid/gid
// 0, entries sorted, inode numbers sequential). Images live under
// <cache>/images/<key>/, where key is a blake3 hash over a format version,
// the kernel, each packed module (name and bytes, in load order) and the
// agent. A rebuild with unchanged inputs writes nothing and reports
// Image.Cached. Extracted kernel packages live under <cache>/kernels/<sha256
// of the .deb>/ and downloaded packages under <cache>/debs/. Every cache entry
// is written to a temporary name in the same directory and renamed into
// place, so concurrent builders and interrupted builds never expose a partial
// entry.
//
// # The filesystem under test
//
// Options.Patches, ModuleSrcs and KernelTree build an image that carries a
// developer's code (docs/fs-under-test.md): the fs/<dir> directories a
// patch touches are extracted from Debian's linux-source tarball (once per
// tarball, <cache>/ksrc/<sha256>/), patched, and their modules built out
// of tree against linux-headers-<version>, stripped and packed in place of
// the stock ones; built modules are cached in <cache>/modbuild/<key>/, and
// the image key covers the patches and sources too. Options.Name records
// the image in <cache>/image-names.json; [Resolve] finds it by name, key
// or directory and [List] lists the cache's images. Patch files are
// untrusted input: their file names are checked (parsePatch) and neither
// their path nor their bytes ever pass through a shell.
//
// # Lane specs
//
// [ParseLaneSpec] reads a lane spec ("ext2", "ext4:inode_size=128", "vfat",
// "btrfs", "ext2:seed=1", ...); [SeedTree] is the tree a seed=N puts into
// the lane's base image. Package guest/baseimage makes those images.
//
// # Dependencies
//
// The package runs host tools (apt-get, apt-cache, dpkg-deb, go, xz or
// zstd for compressed modules, and tar, patch, make, gcc and strip for
// built modules) through os/exec and internal/hosttool. It
// must not import vmm, session or server: it only produces files they
// consume. Build is safe to call concurrently, also from several processes
// sharing one cache directory.
package guest
