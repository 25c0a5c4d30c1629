// Package fsimage parses ext2, ext3 and ext4 filesystem images read through
// an io.ReaderAt: the superblock, 32- and 64-byte group descriptors,
// bitmaps, 128- and 256-byte inodes, block maps and extent trees, and
// directory entries. On top of the parsers it answers geometry questions
// (which 512-byte sectors hold what: Layout, Locate, InodeLocation) and
// lists the nuisance fields a normalized diff masks (NuisanceRanges).
//
// # Untrusted input
//
// The image is made by a guest kernel that Themis is testing and may be
// corrupted on purpose, so every byte is untrusted. Every offset, count and
// length read from the image is bounds-checked against the image size and
// the structure that holds it before it is used; no allocation is sized by
// an unchecked on-disk number, and every walk (indirect blocks, extent
// trees, path lookups) has a fixed bound. Malformed input yields an error
// wrapping ErrCorrupt; a valid image using a feature this package does not
// read (meta_bg, inline data, an external journal, ...) yields one wrapping
// ErrUnsupported. No input makes the package panic; fuzz tests hold it to
// that.
//
// # Purity and concurrency
//
// fsimage is a pure package: it does no I/O of its own beyond ReadAt calls
// on the reader it is given, takes no time, and must not import os/exec,
// the vmm packages or gRPC (internal/arch enforces it). An FS never writes
// the image and never closes the reader. Its methods are safe for
// concurrent use when the reader's ReadAt is; an FS assumes the bytes do
// not change under it (open a new FS after the image changes).
package fsimage
