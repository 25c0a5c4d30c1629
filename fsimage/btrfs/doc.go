// Package btrfs reads single-device btrfs images through an io.ReaderAt,
// enough to answer the below-the-filesystem questions Themis asks of a
// btrfs lane: the superblock, the chunk map (logical to physical addresses,
// from the superblock's system chunk array and the chunk tree), B-tree
// search with checksum verification, path lookup in the default subvolume
// (FS_TREE), inode items and file extents, and which sectors hold what
// (Layout, Locate). Pin rewrites the values mkfs.btrfs draws at random or
// from the clock (device, chunk tree and subvolume UUIDs, inode and root
// times) so a base image is byte-identical run after run.
//
// Only what a single-device image made by mkfs.btrfs and grown by the
// kernel needs is read: the single and DUP profiles, crc32c checksums
// verified (other checksum types are read unverified), uncompressed
// extents located to the byte (a compressed extent is ErrUnsupported).
//
// # Untrusted input
//
// As in package fsimage, whose sentinel errors this package wraps, every
// byte of the image is untrusted: offsets, counts and lengths are checked
// against the structure holding them and the image size before use, tree
// descents are bounded by the level (which must fall by one per step) and
// every walk has a fixed bound. Malformed input yields an error wrapping
// fsimage.ErrCorrupt; a feature not read here one wrapping
// fsimage.ErrUnsupported; a name that is not there io/fs.ErrNotExist. No
// input makes the package panic; fuzz tests hold it to that.
//
// # Purity and concurrency
//
// The package is pure like fsimage: no I/O beyond ReadAt (and WriteAt in
// Pin) on the reader it is given, no time, no os/exec. An FS never writes
// the image; its methods are safe for concurrent use when ReadAt is, and
// assume the bytes do not change under it.
package btrfs
