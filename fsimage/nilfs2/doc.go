// Package nilfs2 reads and rewrites the two superblocks of a nilfs2 image,
// enough to make a base image reproducible: mkfs.nilfs2 draws the volume
// UUID at random (and offers no option to set it), and nilfs-tune refuses
// an image file, so Pin writes a fixed UUID into both superblocks and
// computes their checksums again. Everything else mkfs.nilfs2 writes
// depends only on its options and the clock (frozen by the caller).
//
// # Untrusted input
//
// Every byte of the image is untrusted: a superblock is accepted only with
// the nilfs2 magic, a length within the 1 KiB it occupies and a checksum
// that matches; anything else is an error wrapping fsimage.ErrCorrupt. No
// input makes the package panic; a fuzz test holds it to that.
//
// # Purity
//
// Pure like fsimage: no I/O beyond ReadAt and WriteAt on what it is given,
// no time, no os/exec.
package nilfs2
