package fsimage

import "errors"

var (
	// ErrCorrupt reports an image whose bytes break an ext2/3/4 invariant
	// the parser relies on (bad magic, an offset past the image, a rec_len
	// that runs off its block, ...).
	ErrCorrupt = errors.New("fsimage: corrupt image")
	// ErrUnsupported reports a well-formed image or inode using a feature
	// this package does not read.
	ErrUnsupported = errors.New("fsimage: unsupported feature")
	// ErrTooLarge reports a request whose result would exceed the caller's
	// limit or a fixed bound of this package.
	ErrTooLarge = errors.New("fsimage: too large")
)
