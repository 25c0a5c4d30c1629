package overlay

import (
	"fmt"
	"io"
)

// View is a read-only image of the device as seen through the base and its
// bottom n writable layers: the disk as it was when layer n+1 was pushed
// (at a checkpoint). Reads leave the counters alone. A View is valid while
// the device has at least n layers and those layers are not merged.
type View struct {
	d *Device
	n int
}

// ViewAt returns the View through the bottom n layers (0 = the base alone,
// Depth() = the current image).
func (d *Device) ViewAt(n int) (*View, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if n < 0 || n > len(d.layers) {
		return nil, fmt.Errorf("overlay: view through %d layers with depth %d: %w", n, len(d.layers), ErrDepth)
	}
	return &View{d: d, n: n}, nil
}

// Size is the image size in bytes.
func (v *View) Size() int64 { return v.d.size }

// ReadAt implements io.ReaderAt.
func (v *View) ReadAt(p []byte, off int64) (int, error) {
	d := v.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q, tail, err := d.clip(p, off)
	if err != nil {
		return 0, err
	}
	if v.n > len(d.layers) {
		return 0, fmt.Errorf("overlay: view through %d layers, device now at depth %d: %w", v.n, len(d.layers), ErrDepth)
	}
	if err := d.resolveBelow(q, off, v.n, false); err != nil {
		return 0, err
	}
	return len(q), tail
}

// Hash returns the BLAKE3-256 digest of the view's image, as Device.Hash
// does of the device's. A checkpoint's image (ViewAt(Depth()-1) right
// after a checkpoint or restore pushed its fresh top layer) hashes the
// same whatever the guest writes after it.
func (v *View) Hash() ([32]byte, error) {
	return digest(func(w io.Writer) (int64, error) {
		return writeChunks(w, v.d.size, func(chunk []byte, off int64) error {
			_, err := v.ReadAt(chunk, off)
			return err
		})
	})
}
