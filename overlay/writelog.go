package overlay

import (
	"errors"
	"fmt"
	"io"
)

// MaxLogEntries bounds a write log: past it the log is dropped and marked
// overflowed (LogInfo.Overflowed), and CrashView refuses it.
const MaxLogEntries = 1 << 16

var (
	// ErrNoLog is returned by CrashView and Log when no write log is
	// running (none started, or Pop, PopTo, Merge or StopLog ended it).
	ErrNoLog = errors.New("overlay: no write log")
	// ErrLogOverflow is returned by CrashView when the log passed
	// MaxLogEntries and was dropped, and by every read of a CrashView
	// taken before that (wrapped): its sectors may since have been
	// overwritten in place.
	ErrLogOverflow = errors.New("overlay: write log overflowed")
	// ErrLogNotEmpty is returned by StartLog when the top layer already
	// holds writes: the log's start must be the state at a Push.
	ErrLogNotEmpty = errors.New("overlay: the top layer holds writes: start a write log right after a Push")
)

// LogEntry is one entry of a write log, in the order the device received
// it: a write of Sectors whole sectors at LBA, or a flush (Flush true,
// LBA and Sectors 0), which makes every write before it durable.
type LogEntry struct {
	Flush   bool
	LBA     uint64
	Sectors int
}

// LogInfo is a write log's entries and state.
type LogInfo struct {
	Entries []LogEntry
	// Overflowed is set when the log passed MaxLogEntries and was dropped.
	Overflowed bool
	// Depth is the depth the log started at: the layer its writes go into.
	Depth int
}

// writeLog is the device's running write log. Every logged write put
// fresh sectors into the top layer (never overwriting one in place), so
// each entry's sectors stay as written: the log holds pointers into the
// layer's storage, not copies.
type writeLog struct {
	depth    int // len(d.layers) at StartLog
	entries  []logRecord
	extra    int // sectors only the log still holds (billed to the charger)
	overflow bool
}

// logRecord is one entry with the sectors it wrote.
type logRecord struct {
	LogEntry
	secs []*sector
}

// StartLog starts a write log at the top layer, which must be empty (right
// after a Push): from then on every write and flush is recorded, in order,
// until StopLog, or a Pop, PopTo or Merge (any change of the layers: the
// logged writes may be undone). A log already running is dropped first.
func (d *Device) StartLog() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if len(d.layers[len(d.layers)-1].sectors) != 0 {
		return ErrLogNotEmpty
	}
	d.dropLog()
	d.log = &writeLog{depth: len(d.layers)}
	return nil
}

// StopLog ends the write log, if any, and gives back what only it held.
func (d *Device) StopLog() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropLog()
}

// dropLog ends the log. d.mu is held.
func (d *Device) dropLog() {
	if d.log != nil {
		d.release(d.log.extra)
		d.log = nil
	}
}

// Log returns the running write log's entries.
func (d *Device) Log() (LogInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return LogInfo{}, ErrClosed
	}
	if d.log == nil {
		return LogInfo{}, ErrNoLog
	}
	info := LogInfo{Overflowed: d.log.overflow, Depth: d.log.depth, Entries: make([]LogEntry, len(d.log.entries))}
	for i, r := range d.log.entries {
		info.Entries[i] = r.LogEntry
	}
	return info, nil
}

// logAppend records r, or drops the log's records past MaxLogEntries.
// d.mu is held.
func (d *Device) logAppend(r logRecord) {
	l := d.log
	if l.overflow {
		return
	}
	if len(l.entries) >= MaxLogEntries {
		d.release(l.extra)
		l.entries, l.extra, l.overflow = nil, 0, true
		return
	}
	l.entries = append(l.entries, r)
}

// logging reports whether writes must keep their old sectors for the log.
// d.mu is held.
func (d *Device) logging() bool { return d.log != nil && !d.log.overflow }

// CrashView is the disk a crash could leave: the image at the log's start
// with the chosen logged writes applied in log order. It is valid while
// the log runs; reads after it ended fail with ErrNoLog, and after it
// overflowed with ErrLogOverflow (writes past the overflow are no longer
// kept apart from the sectors the view holds).
type CrashView struct {
	d   *Device
	log *writeLog
	n   int // layers below the log's
	// secs maps each sector the chosen writes hold to its last version
	secs map[uint64]*sector
}

// CrashView returns the view of the log's writes whose indices (into
// LogInfo.Entries) are keep, applied in log order whatever keep's order;
// indices of flushes or out of range are an error.
func (d *Device) CrashView(keep []int) (*CrashView, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil, ErrClosed
	case d.log == nil:
		return nil, ErrNoLog
	case d.log.overflow:
		return nil, ErrLogOverflow
	}
	chosen := make([]bool, len(d.log.entries))
	for _, i := range keep {
		if i < 0 || i >= len(chosen) || d.log.entries[i].Flush {
			return nil, fmt.Errorf("overlay: crash view: entry %d is not a write of the log's %d entries", i, len(chosen))
		}
		chosen[i] = true
	}
	v := &CrashView{d: d, log: d.log, n: d.log.depth - 1, secs: map[uint64]*sector{}}
	for i, r := range d.log.entries {
		if chosen[i] {
			for j, s := range r.secs {
				v.secs[r.LBA+uint64(j)] = s
			}
		}
	}
	return v, nil
}

// Size is the image size in bytes.
func (v *CrashView) Size() int64 { return v.d.size }

// ReadAt implements io.ReaderAt.
func (v *CrashView) ReadAt(p []byte, off int64) (int, error) {
	d := v.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q, tail, err := d.clip(p, off)
	if err != nil {
		return 0, err
	}
	if d.log != v.log {
		return 0, ErrNoLog
	}
	if v.log.overflow {
		return 0, fmt.Errorf("overlay: crash view: read %d bytes at %d: %w", len(p), off, ErrLogOverflow)
	}
	n := len(q)
	for o := off; len(q) > 0; {
		lba := uint64(o / SectorSize)
		in := int(o % SectorSize)
		k := min(SectorSize-in, len(q))
		if s, ok := v.secs[lba]; ok {
			copy(q[:k], s[in:in+k])
		} else if err := d.readBelow(q[:k], o, v.n); err != nil {
			return 0, err
		}
		q, o = q[k:], o+int64(k)
	}
	return n, tail
}

// WriteTo writes the whole view to w, in chunks. It implements
// io.WriterTo.
func (v *CrashView) WriteTo(w io.Writer) (int64, error) {
	return writeChunks(w, v.d.size, func(chunk []byte, off int64) error {
		if _, err := v.ReadAt(chunk, off); err != nil && err != io.EOF {
			return err
		}
		return nil
	})
}

// readBelow reads p at off (inside one sector) through the bottom n layers
// and the base. d.mu is held.
func (d *Device) readBelow(p []byte, off int64, n int) error {
	lba, in := uint64(off/SectorSize), int(off%SectorSize)
	for i := n - 1; i >= 0; i-- {
		if s, ok := d.layers[i].sectors[lba]; ok {
			copy(p, s[in:in+len(p)])
			return nil
		}
	}
	if _, err := d.base.ReadAt(p, off); err != nil && err != io.EOF {
		return fmt.Errorf("overlay: read base at %d: %w", off, err)
	}
	return nil
}
