package fsimage

import (
	"fmt"
	"io"
	"sort"
)

// DiffRange is one run of differing bytes, labelled by where it lies.
type DiffRange struct {
	// Offset and Len locate the run in the image, in bytes.
	Offset int64
	Len    int
	// Region is the structure holding it (Layout of image A; empty when A
	// does not parse as ext2/3/4 in a raw diff), and Field
	// the nuisance field when the run is masked (normalized diffs only).
	Region string
	Group  int
	Field  string
}

// DiffResult compares two images of the same size.
type DiffResult struct {
	// RawSectors counts 512-byte sectors with any differing byte.
	RawSectors int
	// NormalizedSectors counts sectors that still differ once the nuisance
	// fields of both images are masked (equal to RawSectors when a side
	// could not be parsed: then Normalized is false).
	NormalizedSectors int
	Normalized        bool
	// Ranges are the differing runs after masking (all runs when not
	// normalized), at most MaxRanges.
	Ranges []DiffRange
	// Masked are the runs that differ only in nuisance fields, with the field.
	Masked []DiffRange
}

// MaxRanges bounds the runs a DiffResult lists.
const MaxRanges = 10000

// Diff compares images a and b of size bytes, 1 MiB at a time. With
// normalize, both are parsed as ext2/3/4 and their nuisance fields
// (NuisanceRanges: timestamps, UUIDs, hash seed, generations, checksums)
// are masked; an image that does not parse is an error.
func Diff(a, b io.ReaderAt, size int64, normalize bool) (*DiffResult, error) {
	if size <= 0 || size%SectorSize != 0 {
		return nil, fmt.Errorf("fsimage: diff: size %d: %w", size, ErrCorrupt)
	}
	fsA, masks, err := openDiffImages(a, b, size, normalize)
	if err != nil {
		return nil, err
	}
	d := &differ{
		res:   &DiffResult{Normalized: normalize},
		fsA:   fsA,
		masks: masks,
		// No sector seen yet.
		rawSec: -1, normSec: -1,
	}
	const chunk = 1 << 20
	bufA, bufB := make([]byte, chunk), make([]byte, chunk)
	for off := int64(0); off < size; off += chunk {
		n := int(min(chunk, size-off))
		if _, err := a.ReadAt(bufA[:n], off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("fsimage: diff: read A at %d: %w", off, err)
		}
		if _, err := b.ReadAt(bufB[:n], off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("fsimage: diff: read B at %d: %w", off, err)
		}
		for i := 0; i < n; i++ {
			if bufA[i] == bufB[i] {
				d.flush()
				continue
			}
			d.differs(off + int64(i))
		}
	}
	d.flush()
	if !normalize {
		d.res.NormalizedSectors = d.res.RawSectors
	}
	return d.res, nil
}

// openDiffImages parses the images Diff compares. With normalize both must
// parse; it returns image A's FS and both images' nuisance ranges sorted by
// offset. Without, it returns A's FS when A parses (for labels only) and no
// ranges.
func openDiffImages(a, b io.ReaderAt, size int64, normalize bool) (*FS, []ByteRange, error) {
	if !normalize {
		if fs, err := Open(a, size); err == nil {
			return fs, nil, nil // labels only; a raw diff needs no parse
		}
		return nil, nil, nil
	}
	var fsA *FS
	var masks []ByteRange
	for i, r := range []io.ReaderAt{a, b} {
		fs, err := Open(r, size)
		if err != nil {
			return nil, nil, fmt.Errorf("fsimage: diff: image %c: %w", 'A'+i, err)
		}
		m, err := NuisanceRanges(fs)
		if err != nil {
			return nil, nil, fmt.Errorf("fsimage: diff: image %c: %w", 'A'+i, err)
		}
		masks = append(masks, m...)
		if i == 0 {
			fsA = fs
		}
	}
	sort.Slice(masks, func(i, j int) bool { return masks[i].Offset < masks[j].Offset })
	return fsA, masks, nil
}

// differ accumulates a DiffResult as Diff walks the images byte by byte, in
// increasing offset order.
type differ struct {
	res   *DiffResult
	fsA   *FS         // image A, for labels; nil when it does not parse
	masks []ByteRange // nuisance ranges, sorted by offset; nil unless normalized
	mi    int         // first mask that may cover the current offset

	rawSec, normSec int64 // the last sector counted as differing, raw and normalized

	cur       *DiffRange // the run being extended, nil between runs
	curMasked bool       // whether cur lies in a nuisance field
}

// fieldAt returns the nuisance field covering offset o, or "".
func (d *differ) fieldAt(o int64) string {
	for d.mi < len(d.masks) && d.masks[d.mi].Offset+int64(d.masks[d.mi].Len) <= o {
		d.mi++
	}
	for j := d.mi; j < len(d.masks) && d.masks[j].Offset <= o; j++ {
		if o < d.masks[j].Offset+int64(d.masks[j].Len) {
			return d.masks[j].Field
		}
	}
	return ""
}

// flush ends the current run, listing it under Masked or Ranges while there
// is room.
func (d *differ) flush() {
	if d.cur == nil {
		return
	}
	if d.curMasked {
		if len(d.res.Masked) < MaxRanges {
			d.res.Masked = append(d.res.Masked, *d.cur)
		}
	} else if len(d.res.Ranges) < MaxRanges {
		d.res.Ranges = append(d.res.Ranges, *d.cur)
	}
	d.cur = nil
}

// differs counts the differing byte at offset o: its sector, and the run it
// extends or starts.
func (d *differ) differs(o int64) {
	sec := o / SectorSize
	if sec != d.rawSec {
		d.res.RawSectors++
		d.rawSec = sec
	}
	field := ""
	if d.res.Normalized {
		field = d.fieldAt(o)
	}
	masked := field != ""
	if !masked && sec != d.normSec {
		d.res.NormalizedSectors++
		d.normSec = sec
	}
	if d.cur != nil && (d.curMasked != masked || d.cur.Field != field || d.cur.Offset+int64(d.cur.Len) != o) {
		d.flush()
	}
	if d.cur == nil {
		d.cur = &DiffRange{Offset: o, Field: field}
		d.curMasked = masked
		if d.fsA != nil {
			r := d.fsA.Locate(uint64(sec))
			d.cur.Region, d.cur.Group = r.Kind, r.Group
		}
	}
	d.cur.Len++
}
