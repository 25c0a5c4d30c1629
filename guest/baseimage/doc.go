// Package baseimage makes the lanes' base images: [Make] makes a lane
// spec's filesystem image on the host with its mkfs — empty, or with
// seed=N holding guest.SeedTree, written with debugfs —, pinning everything
// that would otherwise vary between runs (time [FakeTime], [UUID] and hash
// seed, root owner, volume id [VolumeID]; for btrfs, whose mkfs takes only
// the filesystem UUID, the device, chunk tree and subvolume UUIDs and the
// times are rewritten afterwards with btrfs.Pin), so the same spec and tool
// versions give a byte-identical image. Images are cached under
// <cache>/bases/<key>.img, the key hashing the spec, the mkfs (and debugfs)
// binary, version and config; callers must treat them as read-only (wrap
// them in an overlay).
//
// It is apart from package guest because it reads and rewrites btrfs
// (fsimage/btrfs), which the daemon's core must not reach: session and
// launch take a [launch.BaseMaker], and what wires them (the daemon, the
// CLI, tests) passes [Make].
//
// The cache is bounded ([DefaultMaxBytes], or [Maker]'s bound; the daemon's
// limits.max_base_cache_mib): a hit marks an image used, and making one
// evicts the least recently used beyond the bound, never one used in the
// last ten minutes.
//
// Make is safe to call concurrently, also from several processes sharing
// one cache directory: each image is written to a temporary name and
// renamed into place.
package baseimage
