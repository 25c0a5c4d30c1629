package nbd

import (
	"sync/atomic"
	"time"
)

// Counts is what a Server has served since it was made, over all its
// connections: per command the requests and the bytes they asked for, the
// requests refused before the backend, and the time spent serving. A
// snapshot (Server.Counts); Sub gives what happened between two.
type Counts struct {
	// Reads and ReadBytes count NBD_CMD_READ requests (a backend error's
	// EIO included) and the bytes they asked for.
	Reads, ReadBytes int64
	// Writes and WriteBytes count NBD_CMD_WRITE requests and their payload.
	Writes, WriteBytes int64
	// WriteZeroes and WriteZeroesBytes count NBD_CMD_WRITE_ZEROES requests
	// and the bytes they zeroed.
	WriteZeroes, WriteZeroesBytes int64
	// Flushes counts NBD_CMD_FLUSH requests (a write's FUA flag is not one).
	Flushes int64
	// Rejected counts requests refused before the backend: out of range,
	// too long, or a command the server does not offer (TRIM among them).
	Rejected int64
	// Serve is the time from a request's header read to its reply flushed
	// (a write's payload read included), summed over requests.
	Serve time.Duration
}

// Requests is every request counted: served and rejected.
func (c Counts) Requests() int64 { return c.Reads + c.Writes + c.WriteZeroes + c.Flushes + c.Rejected }

// Add returns c + d, field by field.
func (c Counts) Add(d Counts) Counts {
	return Counts{
		Reads: c.Reads + d.Reads, ReadBytes: c.ReadBytes + d.ReadBytes,
		Writes: c.Writes + d.Writes, WriteBytes: c.WriteBytes + d.WriteBytes,
		WriteZeroes: c.WriteZeroes + d.WriteZeroes, WriteZeroesBytes: c.WriteZeroesBytes + d.WriteZeroesBytes,
		Flushes: c.Flushes + d.Flushes, Rejected: c.Rejected + d.Rejected, Serve: c.Serve + d.Serve,
	}
}

// Sub returns c - d, field by field: what a server served between the
// snapshots d and c.
func (c Counts) Sub(d Counts) Counts {
	return c.Add(Counts{
		Reads: -d.Reads, ReadBytes: -d.ReadBytes, Writes: -d.Writes, WriteBytes: -d.WriteBytes,
		WriteZeroes: -d.WriteZeroes, WriteZeroesBytes: -d.WriteZeroesBytes, Flushes: -d.Flushes,
		Rejected: -d.Rejected, Serve: -d.Serve,
	})
}

// stats are a Server's live counters: atomics, so that Counts may be read
// while connections are served, and a request costs a few adds.
type stats struct {
	reads, readBytes   atomic.Int64
	writes, writeBytes atomic.Int64
	zeroes, zeroBytes  atomic.Int64
	flushes, rejected  atomic.Int64
	serveNs            atomic.Int64
}

// count records a served request of type typ and n bytes (a type check
// lets through: read, write, write zeroes, flush).
func (s *stats) count(typ uint16, n int64) {
	switch typ {
	case cmdRead:
		s.reads.Add(1)
		s.readBytes.Add(n)
	case cmdWrite:
		s.writes.Add(1)
		s.writeBytes.Add(n)
	case cmdWriteZeroes:
		s.zeroes.Add(1)
		s.zeroBytes.Add(n)
	case cmdFlush:
		s.flushes.Add(1)
	default:
		s.rejected.Add(1)
	}
}

// since adds the time since t0 to the serve time.
func (s *stats) since(t0 time.Time) { s.serveNs.Add(int64(time.Since(t0))) }

// Counts returns what s has served so far. Each field is read atomically;
// the snapshot as a whole is not (a request served meanwhile may show in
// one field and not yet in another).
func (s *Server) Counts() Counts {
	c := &s.stats
	return Counts{
		Reads: c.reads.Load(), ReadBytes: c.readBytes.Load(),
		Writes: c.writes.Load(), WriteBytes: c.writeBytes.Load(),
		WriteZeroes: c.zeroes.Load(), WriteZeroesBytes: c.zeroBytes.Load(),
		Flushes: c.flushes.Load(), Rejected: c.rejected.Load(),
		Serve: time.Duration(c.serveNs.Load()),
	}
}
