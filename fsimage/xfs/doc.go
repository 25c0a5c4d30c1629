// Package xfs reads xfs (v5) images through an io.ReaderAt, enough to find
// the corruption targets Themis flips on an xfs lane: the primary
// superblock, the first allocation group's AGF and AGI headers, inodes by
// number, path lookup through short-form directories, and a file's data
// through its extent list. Fields are located as the image offset of their
// least significant byte (xfs is big-endian) so that a flip of bit 0 there
// changes the value by one, as on ext2 and btrfs.
//
// Only what a small image made by mkfs.xfs and grown by a few ops needs is
// read: directories in short form (inline in the inode; block and leaf
// directories are ErrUnsupported) and files in extent format (a B+tree
// fork is ErrUnsupported). Checksums are not verified: the kernel and
// xfs_repair do that; this package says where things are.
//
// # Untrusted input
//
// As in package fsimage, whose sentinel errors this package wraps, every
// byte of the image is untrusted: geometry is checked against the limits
// the format allows and against the image size, every inode and extent
// read is bounds-checked, and path lookups are bounded in depth. Malformed
// input yields an error wrapping fsimage.ErrCorrupt; an unsupported
// feature one wrapping fsimage.ErrUnsupported; a missing name one wrapping
// io/fs.ErrNotExist. No input makes the package panic; fuzz tests hold it
// to that.
//
// # Purity
//
// Pure like fsimage: no I/O beyond ReadAt on the reader it is given, no
// time, no os/exec.
package xfs
