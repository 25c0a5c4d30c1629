package fsimage

import (
	"fmt"
	"io"
	"sort"
)

// DiffRange is one run of differing bytes, labelled by where it lies.
type DiffRange struct {
	// Offset and Len locate the run in the image, in bytes.
	Offset int64 `json:"offset"`
	Len    int   `json:"len"`
	// Region is the structure holding it (Layout of image A; empty when A
	// does not parse as ext2/3/4 in a raw diff), and Field
	// the nuisance field when the run is masked (normalized diffs only).
	Region string `json:"region"`
	Group  int    `json:"group"`
	Field  string `json:"field,omitempty"`
}

// DiffResult compares two images of the same size.
type DiffResult struct {
	// RawSectors counts 512-byte sectors with any differing byte.
	RawSectors int `json:"raw_sectors"`
	// NormalizedSectors counts sectors that still differ once the nuisance
	// fields of both images are masked (equal to RawSectors when a side
	// could not be parsed: then Normalized is false).
	NormalizedSectors int  `json:"normalized_sectors"`
	Normalized        bool `json:"normalized"`
	// Ranges are the differing runs after masking (all runs when not
	// normalized), at most MaxRanges.
	Ranges []DiffRange `json:"ranges"`
	// Masked are the runs that differ only in nuisance fields, with the field.
	Masked []DiffRange `json:"masked,omitempty"`
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
	var fsA *FS
	var masks []ByteRange
	if normalize {
		for i, r := range []io.ReaderAt{a, b} {
			fs, err := Open(r, size)
			if err != nil {
				return nil, fmt.Errorf("fsimage: diff: image %c: %w", 'A'+i, err)
			}
			m, err := NuisanceRanges(fs)
			if err != nil {
				return nil, fmt.Errorf("fsimage: diff: image %c: %w", 'A'+i, err)
			}
			masks = append(masks, m...)
			if i == 0 {
				fsA = fs
			}
		}
		sort.Slice(masks, func(i, j int) bool { return masks[i].Offset < masks[j].Offset })
	} else if fs, err := Open(a, size); err == nil {
		fsA = fs // labels only; a raw diff needs no parse
	}
	res := &DiffResult{Normalized: normalize}
	const chunk = 1 << 20
	bufA, bufB := make([]byte, chunk), make([]byte, chunk)
	mi := 0 // first mask that may cover the current offset
	// fieldAt returns the nuisance field covering offset o, or "".
	fieldAt := func(o int64) string {
		for mi < len(masks) && masks[mi].Offset+int64(masks[mi].Len) <= o {
			mi++
		}
		for j := mi; j < len(masks) && masks[j].Offset <= o; j++ {
			if o < masks[j].Offset+int64(masks[j].Len) {
				return masks[j].Field
			}
		}
		return ""
	}
	rawSec, normSec := int64(-1), int64(-1)
	var cur *DiffRange
	var curMasked bool
	flush := func() {
		if cur == nil {
			return
		}
		if curMasked {
			if len(res.Masked) < MaxRanges {
				res.Masked = append(res.Masked, *cur)
			}
		} else if len(res.Ranges) < MaxRanges {
			res.Ranges = append(res.Ranges, *cur)
		}
		cur = nil
	}
	for off := int64(0); off < size; off += chunk {
		n := int(min(chunk, size-off))
		if _, err := a.ReadAt(bufA[:n], off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("fsimage: diff: read A at %d: %w", off, err)
		}
		if _, err := b.ReadAt(bufB[:n], off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("fsimage: diff: read B at %d: %w", off, err)
		}
		for i := 0; i < n; i++ {
			o := off + int64(i)
			if bufA[i] == bufB[i] {
				flush()
				continue
			}
			sec := o / SectorSize
			if sec != rawSec {
				res.RawSectors++
				rawSec = sec
			}
			field := ""
			if normalize {
				field = fieldAt(o)
			}
			masked := field != ""
			if !masked && sec != normSec {
				res.NormalizedSectors++
				normSec = sec
			}
			if cur != nil && (curMasked != masked || cur.Field != field || cur.Offset+int64(cur.Len) != o) {
				flush()
			}
			if cur == nil {
				cur = &DiffRange{Offset: o, Field: field}
				curMasked = masked
				if fsA != nil {
					r := fsA.Locate(uint64(sec))
					cur.Region, cur.Group = r.Kind, r.Group
				}
			}
			cur.Len++
		}
	}
	flush()
	if !normalize {
		res.NormalizedSectors = res.RawSectors
	}
	return res, nil
}
