package overlay

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// Source is what Mirror copies from: an image over the same base as the
// device it is mirrored into, and the sectors where it may differ from
// that base.
type Source interface {
	io.ReaderAt
	Size() int64
	// Changed lists, sorted, every sector that may differ from the base.
	Changed() []uint64
}

// Changed lists, sorted, the sectors the view holds above the base: those
// of the layers below the log and of the kept writes.
func (v *CrashView) Changed() []uint64 {
	d := v.d
	d.mu.Lock()
	defer d.mu.Unlock()
	set := make(map[uint64]bool, len(v.secs))
	for lba := range v.secs {
		set[lba] = true
	}
	for _, l := range d.layers[:min(v.n, len(d.layers))] {
		for lba := range l.sectors {
			set[lba] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Changed lists, sorted, the sectors any layer holds: where the device may
// differ from its base.
func (d *Device) Changed() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	set := map[uint64]bool{}
	for _, l := range d.layers {
		for lba := range l.sectors {
			set[lba] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Mirror makes d read as src: every sector where either may differ from
// the base is written from src into d's top layer. d's base must hold
// what src's does (a spare disk opened over a lane's base image, src a
// crash view of the lane): sectors neither changed are left to it. The
// copy is of the changed sectors only.
func (d *Device) Mirror(src Source) error {
	if src.Size() != d.size {
		return fmt.Errorf("overlay: mirror a %d-byte image into a %d-byte device", src.Size(), d.size)
	}
	lbas := slices.Concat(d.Changed(), src.Changed())
	slices.Sort(lbas)
	lbas = slices.Compact(lbas)
	buf := make([]byte, 0, 64*SectorSize)
	flush := func(start uint64) error {
		if len(buf) == 0 {
			return nil
		}
		off := int64(start) * SectorSize
		if _, err := src.ReadAt(buf, off); err != nil && err != io.EOF {
			return fmt.Errorf("overlay: mirror: read at %d: %w", off, err)
		}
		if _, err := d.WriteAt(buf, off); err != nil {
			return fmt.Errorf("overlay: mirror: write at %d: %w", off, err)
		}
		buf = buf[:0]
		return nil
	}
	var start uint64
	for i, lba := range lbas {
		if i > 0 && (lba != lbas[i-1]+1 || len(buf) == cap(buf)) {
			if err := flush(start); err != nil {
				return err
			}
		}
		if len(buf) == 0 {
			start = lba
		}
		buf = buf[:len(buf)+SectorSize]
	}
	return flush(start)
}
