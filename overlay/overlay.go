package overlay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/zeebo/blake3"
)

// SectorSize is the size of one sector (the unit of an LBA) in bytes.
const SectorSize = 512

// chunkSize is the buffer size, in bytes, used to stream the resolved image.
const chunkSize = 1 << 20

var (
	// ErrBaseLayer is returned by Pop when only one writable layer is left.
	ErrBaseLayer = errors.New("overlay: cannot pop the last writable layer")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("overlay: device closed")
	// ErrBaseSize is returned when the base size is negative or not a multiple of SectorSize.
	ErrBaseSize = errors.New("overlay: base size is not a multiple of the sector size")
	// ErrOutOfRange is returned by WriteAt for a range that is not inside [0, Size()).
	ErrOutOfRange = errors.New("overlay: access out of range")
	// ErrDepth is returned by PopTo for a depth outside [1, Depth()].
	ErrDepth = errors.New("overlay: invalid layer depth")
)

// sector is the contents of one sector held by a layer.
type sector = [SectorSize]byte

// layer is one writable layer: the sectors written since its Push.
type layer struct {
	sectors map[uint64]*sector
	read    uint64 // sectors served to ReadAt
	written uint64 // sectors written by WriteAt
}

func newLayer() *layer { return &layer{sectors: make(map[uint64]*sector)} }

// LayerStats reports one layer's counters (see Device.Stats).
type LayerStats struct {
	// SectorsRead counts sectors served by this layer to ReadAt since the
	// last ResetCounters.
	SectorsRead uint64
	// SectorsWritten counts sectors written into this layer by WriteAt since
	// the last ResetCounters (a sector written twice counts twice).
	SectorsWritten uint64
	// Sectors is the number of sectors the layer holds (for the base: all of them).
	Sectors int
}

// Device is a copy-on-write block device: an immutable base plus a stack of
// writable layers. The zero value is not usable; use Open or New.
type Device struct {
	mu       sync.Mutex
	base     io.ReaderAt
	baseFile *os.File // non-nil when Open opened the base; closed by Close
	size     int64
	baseRead uint64 // sectors the base served to ReadAt
	layers   []*layer
	closed   bool
	// readSet, while TrackReads is on, holds every sector served to
	// ReadAt since tracking began or the last ResetCounters; nil when off.
	readSet map[uint64]struct{}
	// charger is billed SectorCost for every sector the layers hold (nil: none).
	charger Charger
	// log is the running write log (StartLog), nil when none.
	log *writeLog
}

// SectorCost is the host memory a held sector is billed: its 512 bytes
// and, approximately, its entry in the layer's map.
const SectorCost = SectorSize + 32

// Charger is billed for the sectors a Device holds (a session's budget,
// internal/budget's Account). Charge refuses by returning an error.
type Charger interface {
	Charge(n int64) error
	Release(n int64)
}

// SetCharger bills c for the sectors the layers hold now (refused: no
// change) and from then on for each new sector a write adds; a refused
// write writes nothing and returns c's error, and a write that fails part
// way releases what it billed for the sectors it did not add. Pop, PopTo, Merge and Close
// give the bytes of the sectors they drop back. The charger is set once.
func (d *Device) SetCharger(c Charger) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.charger != nil {
		return errors.New("overlay: charger already set")
	}
	n := 0
	for _, l := range d.layers {
		n += len(l.sectors)
	}
	if err := c.Charge(int64(n) * SectorCost); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	d.charger = c
	return nil
}

// release gives n sectors' bytes back to the charger.
func (d *Device) release(n int) {
	if d.charger != nil && n > 0 {
		d.charger.Release(int64(n) * SectorCost)
	}
}

// Open opens an immutable base image file read-only and returns a Device with
// one empty writable layer. The file's size must be a multiple of SectorSize.
// The Device owns the file and closes it in Close.
func Open(path string) (*Device, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("overlay: open base: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("overlay: stat base: %w", err), closeErr(f))
	}
	d, err := New(f, fi.Size())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("overlay: open %s: %w", path, err), closeErr(f))
	}
	d.baseFile = f
	return d, nil
}

func closeErr(f *os.File) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("overlay: close base: %w", err)
	}
	return nil
}

// New wraps base, of size bytes, as the immutable base of a new Device with
// one empty writable layer. size must be a non-negative multiple of
// SectorSize. New never writes to or closes base.
func New(base io.ReaderAt, size int64) (*Device, error) {
	if size < 0 || size%SectorSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBaseSize, size)
	}
	return &Device{base: base, size: size, layers: []*layer{newLayer()}}, nil
}

// Size returns the size of the device in bytes.
func (d *Device) Size() int64 { return d.size }

// ReadAt reads len(p) bytes of the resolved image at byte offset off. Like
// os.File, it returns io.EOF when fewer than len(p) bytes are left before
// Size(). Each sector touched is counted as served by the layer holding it.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q, tail, err := d.clip(p, off)
	if err != nil {
		return 0, err
	}
	if err := d.resolve(q, off, true); err != nil {
		return 0, err
	}
	return len(q), tail
}

// clip checks a read of p at off and returns the part of p inside the
// device and the error the read ends with (io.EOF when it passes the end,
// as os.File's ReadAt). d.mu is held.
func (d *Device) clip(p []byte, off int64) (q []byte, tail, err error) {
	switch {
	case d.closed:
		return nil, nil, ErrClosed
	case off < 0:
		return nil, nil, fmt.Errorf("overlay: read at negative offset %d: %w", off, ErrOutOfRange)
	case off >= d.size && len(p) == 0:
		return nil, nil, nil
	case off >= d.size:
		return nil, io.EOF, nil
	case int64(len(p)) > d.size-off:
		return p[:d.size-off], io.EOF, nil
	}
	return p, nil, nil
}

// resolve fills p with the resolved image at off; the range must lie inside
// the device. With count set it updates the read counters. d.mu must be held.
func (d *Device) resolve(p []byte, off int64, count bool) error {
	return d.resolveBelow(p, off, len(d.layers), count)
}

// resolveBelow is resolve through the bottom layers of the device (and
// the base): the image a View through them sees.
func (d *Device) resolveBelow(p []byte, off int64, layers int, count bool) error {
	for len(p) > 0 {
		lba := uint64(off / SectorSize)
		in := int(off % SectorSize)
		n := min(SectorSize-in, len(p))
		if s, l := d.lookupBelow(lba, layers); s != nil {
			copy(p[:n], s[in:in+n])
			if count {
				l.read++
				d.noteRead(lba, 1)
			}
			p, off = p[n:], off+int64(n)
			continue
		}
		// Extend a run of sectors that no layer holds and read it from
		// the base in one call.
		run, sectors := n, uint64(1)
		for run < len(p) {
			if s, _ := d.lookupBelow(lba+sectors, layers); s != nil {
				break
			}
			run += min(SectorSize, len(p)-run)
			sectors++
		}
		got, err := d.base.ReadAt(p[:run], off)
		if got < run {
			if err == nil || errors.Is(err, io.EOF) {
				// The base is shorter than the size it was given.
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("overlay: read base at %d: %w", off, err)
		}
		if count {
			d.baseRead += sectors
			d.noteRead(lba, sectors)
		}
		p, off = p[run:], off+int64(run)
	}
	return nil
}

// noteRead adds sectors [lba, lba+n) to the read set when reads are
// tracked. d.mu must be held.
func (d *Device) noteRead(lba, n uint64) {
	if d.readSet == nil {
		return
	}
	for i := range n {
		d.readSet[lba+i] = struct{}{}
	}
}

// lookupBelow returns the topmost copy of sector lba among the bottom
// layers and its layer, or nil when only the base has it. d.mu must be
// held.
func (d *Device) lookupBelow(lba uint64, layers int) (*sector, *layer) {
	for i := layers - 1; i >= 0; i-- {
		if s, ok := d.layers[i].sectors[lba]; ok {
			return s, d.layers[i]
		}
	}
	return nil, nil
}

// WriteAt writes p at byte offset off into the top layer. Partial sectors are
// completed from the resolved image below (read-modify-write). A write that
// does not fit inside [0, Size()) fails with ErrOutOfRange and writes nothing.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if off < 0 || off > d.size || int64(len(p)) > d.size-off {
		return 0, fmt.Errorf("overlay: write %d bytes at %d (size %d): %w", len(p), off, d.size, ErrOutOfRange)
	}
	top := d.layers[len(d.layers)-1]
	logging := d.logging()
	billed, err := d.charge(top, off, len(p), logging)
	if err != nil {
		return 0, err
	}
	rec := logRecord{LogEntry: LogEntry{LBA: uint64(off / SectorSize)}}
	total := len(p)
	for len(p) > 0 {
		lba := uint64(off / SectorSize)
		in := int(off % SectorSize)
		n := min(SectorSize-in, len(p))
		_, held := top.sectors[lba]
		s, err := d.sectorToWrite(top, lba, n < SectorSize, logging)
		if err != nil {
			d.release(billed) // what the sectors not made were billed
			return total - len(p), err
		}
		if !held || logging { // a new sector: one billed is used
			billed--
		}
		copy(s[in:in+n], p[:n])
		top.written++
		if logging {
			rec.secs = append(rec.secs, s)
		}
		p, off = p[n:], off+int64(n)
	}
	if logging && len(rec.secs) > 0 {
		rec.Sectors = len(rec.secs)
		d.logAppend(rec)
	}
	return total, nil
}

// sectorToWrite returns top's sector lba to write into, made if top does
// not hold it (filled from below when partial). While logging, the sector
// is always a fresh one (the old one stays the log's) filled with the
// current contents when partial. d.mu is held.
func (d *Device) sectorToWrite(top *layer, lba uint64, partial, logging bool) (*sector, error) {
	s, ok := top.sectors[lba]
	if ok && !logging {
		return s, nil
	}
	fresh := new(sector)
	switch {
	case ok && partial:
		*fresh = *s
	case !ok && partial:
		if err := d.resolve(fresh[:], int64(lba)*SectorSize, false); err != nil {
			return nil, err
		}
	}
	if ok { // logging: the replaced sector is the log's alone now
		d.log.extra++
	}
	top.sectors[lba] = fresh
	return fresh, nil
}

// charge bills the charger for the sectors of [off, off+n) that top does
// not hold yet, and, while logging, for those it does (the old ones stay
// the log's), and returns how many sectors it billed (0 without a
// charger): a write that fails before making them all releases the rest.
// d.mu is held.
func (d *Device) charge(top *layer, off int64, n int, logging bool) (int, error) {
	if d.charger == nil || n == 0 {
		return 0, nil
	}
	fresh := 0
	for lba := uint64(off / SectorSize); lba <= uint64((off+int64(n)-1)/SectorSize); lba++ {
		if _, ok := top.sectors[lba]; !ok || logging {
			fresh++
		}
	}
	if err := d.charger.Charge(int64(fresh) * SectorCost); err != nil {
		return 0, fmt.Errorf("overlay: write %d bytes at %d: %w", n, off, err)
	}
	return fresh, nil
}

// Flush implements the optional flusher of block backends: the device holds
// everything in memory, so it only records the flush in the write log, if
// one runs.
func (d *Device) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.logging() {
		d.logAppend(logRecord{LogEntry: LogEntry{Flush: true}})
	}
	return nil
}

// Push adds an empty writable layer on top in O(1) and returns the new Depth.
func (d *Device) Push() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.layers = append(d.layers, newLayer())
	return len(d.layers)
}

// Pop drops the top layer, and every write made into it, in O(1). It returns
// ErrBaseLayer when Depth() is 1.
func (d *Device) Pop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if len(d.layers) == 1 {
		return ErrBaseLayer
	}
	d.dropLog()
	d.release(len(d.layers[len(d.layers)-1].sectors))
	d.layers[len(d.layers)-1] = nil
	d.layers = d.layers[:len(d.layers)-1]
	return nil
}

// PopTo pops layers until Depth() == depth. depth must be in [1, Depth()].
func (d *Device) PopTo(depth int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if depth < 1 || depth > len(d.layers) {
		return fmt.Errorf("overlay: pop to %d with depth %d: %w", depth, len(d.layers), ErrDepth)
	}
	if depth < len(d.layers) {
		d.dropLog()
	}
	for _, l := range d.layers[depth:] {
		d.release(len(l.sectors))
	}
	clear(d.layers[depth:])
	d.layers = d.layers[:depth]
	return nil
}

// Merge folds writable layer i (1-based, 2..Depth()) into the layer below it
// and removes it, so the image seen through the stack is unchanged. It costs
// O(sectors in layer i). Counters of the two layers are summed.
func (d *Device) Merge(i int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if i < 2 || i > len(d.layers) {
		return fmt.Errorf("overlay: merge layer %d with depth %d: %w", i, len(d.layers), ErrDepth)
	}
	d.dropLog()
	upper, lower := d.layers[i-1], d.layers[i-2]
	dup := 0
	for lba, sec := range upper.sectors {
		if _, ok := lower.sectors[lba]; ok {
			dup++
		}
		lower.sectors[lba] = sec
	}
	d.release(dup)
	lower.read += upper.read
	lower.written += upper.written
	d.layers = append(d.layers[:i-1], d.layers[i:]...)
	d.layers[len(d.layers):cap(d.layers)][0] = nil // drop the stale pointer past the end
	return nil
}

// Depth returns the number of writable layers (at least 1).
func (d *Device) Depth() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.layers)
}

// Stats returns the counters of the base (index 0) and of every writable
// layer bottom-up (index 1 to Depth()).
func (d *Device) Stats() []LayerStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := make([]LayerStats, 0, len(d.layers)+1)
	st = append(st, LayerStats{SectorsRead: d.baseRead, Sectors: int(d.size / SectorSize)})
	for _, l := range d.layers {
		st = append(st, LayerStats{SectorsRead: l.read, SectorsWritten: l.written, Sectors: len(l.sectors)})
	}
	return st
}

// ResetCounters zeroes the read and write counters of the base and every
// layer, and empties the read set.
func (d *Device) ResetCounters() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.baseRead = 0
	for _, l := range d.layers {
		l.read, l.written = 0, 0
	}
	if d.readSet != nil {
		clear(d.readSet)
	}
}

// TrackReads turns the read set on or off. While on, every sector served
// to ReadAt is noted (counted reads only, as for SectorsRead), at the cost
// of a map insert per sector; off, the set is dropped. Turning it on when it
// is on keeps the set.
func (d *Device) TrackReads(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !on:
		d.readSet = nil
	case d.readSet == nil:
		d.readSet = make(map[uint64]struct{})
	}
}

// ReadSet returns the sorted distinct LBAs served to ReadAt since
// TrackReads(true) or the last ResetCounters, from any layer or the base;
// nil when reads are not tracked.
func (d *Device) ReadSet() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.readSet == nil {
		return nil
	}
	lbas := make([]uint64, 0, len(d.readSet))
	for lba := range d.readSet {
		lbas = append(lbas, lba)
	}
	slices.Sort(lbas)
	return lbas
}

// WriteSet returns the sorted LBAs (sector numbers) held by the top layer:
// the sectors written since the last Push.
func (d *Device) WriteSet() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	top := d.layers[len(d.layers)-1]
	lbas := make([]uint64, 0, len(top.sectors))
	for lba := range top.sectors {
		lbas = append(lbas, lba)
	}
	slices.Sort(lbas)
	return lbas
}

// Hash returns the BLAKE3-256 digest of the whole resolved image.
func (d *Device) Hash() ([32]byte, error) {
	return digest(d.WriteTo)
}

// digest is the BLAKE3-256 of what write writes (an image's WriteTo).
func digest(write func(io.Writer) (int64, error)) ([32]byte, error) {
	var sum [32]byte
	h := blake3.New()
	if _, err := write(h); err != nil {
		return sum, fmt.Errorf("overlay: hash: %w", err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// WriteTo writes the whole resolved image to w, streaming it in 1 MiB
// chunks. It implements io.WriterTo. The device is locked for the duration.
func (d *Device) WriteTo(w io.Writer) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	return writeChunks(w, d.size, func(chunk []byte, off int64) error { return d.resolve(chunk, off, false) })
}

// writeChunks writes an image of size bytes to w in chunkSize chunks,
// each filled by read.
func writeChunks(w io.Writer, size int64, read func(chunk []byte, off int64) error) (int64, error) {
	buf := make([]byte, min(chunkSize, size))
	var written int64
	for off := int64(0); off < size; {
		chunk := buf[:min(int64(len(buf)), size-off)]
		if err := read(chunk, off); err != nil {
			return written, err
		}
		n, err := w.Write(chunk)
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("overlay: write image at %d: %w", off, err)
		}
		off += int64(n)
	}
	return written, nil
}

// Materialize writes the resolved image to path (mode 0600). It writes a
// temporary file in the same directory, syncs it and renames it over path,
// so path either keeps its old contents or holds the complete image.
func (d *Device) Materialize(path string) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("overlay: materialize: %w", err)
	}
	defer func() {
		if err != nil {
			if rmErr := os.Remove(f.Name()); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("overlay: materialize: remove temp: %w", rmErr))
			}
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return errors.Join(fmt.Errorf("overlay: materialize: %w", err), closeErr(f))
	}
	if _, err := d.WriteTo(f); err != nil {
		return errors.Join(fmt.Errorf("overlay: materialize %s: %w", path, err), closeErr(f))
	}
	if err := f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("overlay: materialize: %w", err), closeErr(f))
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("overlay: materialize: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("overlay: materialize: %w", err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	df, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("overlay: materialize: open dir: %w", err)
	}
	if err := df.Sync(); err != nil {
		return errors.Join(fmt.Errorf("overlay: materialize: sync dir: %w", err), df.Close())
	}
	if err := df.Close(); err != nil {
		return fmt.Errorf("overlay: materialize: close dir: %w", err)
	}
	return nil
}

// Close releases the layers and, when Open opened it, the base file. It is
// idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.dropLog()
	for _, l := range d.layers {
		d.release(len(l.sectors))
	}
	d.layers = []*layer{newLayer()}
	d.readSet = nil
	if d.baseFile != nil {
		f := d.baseFile
		d.baseFile = nil
		return closeErr(f)
	}
	return nil
}
