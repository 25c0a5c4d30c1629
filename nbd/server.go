package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Backend is the block device an NBD export serves. ReadAt and WriteAt are
// only called with ranges inside [0, Size()); Size must not change while a
// connection is served. A Backend shared by several connections must be safe
// for concurrent use.
type Backend interface {
	io.ReaderAt
	io.WriterAt
	// Size returns the export size in bytes.
	Size() int64
}

// Flusher is an optional Backend ability: Flush makes completed writes
// durable. Without it NBD_CMD_FLUSH and FUA succeed without doing anything.
type Flusher interface {
	Flush() error
}

// Server serves one Backend as a single NBD export. Set the fields before
// calling Serve or ServeConn and don't change them afterwards.
type Server struct {
	// Backend is the exported device.
	Backend Backend
	// Name is the export name. Clients may ask for it or for the empty
	// (default) name; any other name is refused.
	Name string
	// Log receives connection-level events; nil means zap.NewNop().
	Log *zap.Logger

	stats stats // what it served: Counts
}

func (s *Server) logger() *zap.Logger {
	if s.Log == nil {
		return zap.NewNop()
	}
	return s.Log.Named("nbd")
}

// onceCloser closes a resource once, from whichever goroutine comes first,
// and hands the result to every caller (waiting for the first to finish).
type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}

// Serve accepts connections on l and serves each on its own goroutine until
// ctx is done or l is closed; both count as a clean stop and return nil.
// Before it returns, Serve closes l and every connection it accepted and waits
// for their handlers. Errors of single connections are logged, not returned.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	log := s.logger()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lc := &onceCloser{c: l}
	stop := context.AfterFunc(ctx, func() { _ = lc.close() }) // result read below
	defer stop()

	var wg sync.WaitGroup
	var err error
	for {
		c, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil && !errors.Is(aerr, net.ErrClosed) {
				err = fmt.Errorf("nbd: accept: %w", aerr)
			}
			break
		}
		wg.Go(func() {
			if err := s.ServeConn(ctx, c); err != nil {
				log.Warn("connection failed", zap.String("remote", remoteAddr(c)), zap.Error(err))
			}
		})
	}
	cancel() // closes the listener and every connection
	wg.Wait()
	if cerr := lc.close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, fmt.Errorf("nbd: close listener: %w", cerr))
	}
	return err
}

// remoteAddr names the peer of c for logs (unix peers are often unnamed).
func remoteAddr(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	return "unnamed"
}

// conn is the state of one client connection.
type conn struct {
	s        *Server
	log      *zap.Logger
	r        *bufio.Reader
	w        *bufio.Writer
	buf      []byte // payload buffer, reused between requests
	noZeroes bool   // the client set NBD_FLAG_C_NO_ZEROES
}

// ServeConn runs the handshake and then serves requests on c, one at a time
// and in order, until the client disconnects, ctx is done (both return nil)
// or the connection fails. It closes c before returning.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) (err error) {
	if s.Backend == nil {
		return errors.Join(errors.New("nbd: server has no backend"), c.Close())
	}
	cc := &onceCloser{c: c}
	stop := context.AfterFunc(ctx, func() { _ = cc.close() }) // result read below
	defer func() {
		stop()
		if ctx.Err() != nil {
			err = nil // a cancelled connection's I/O errors are expected
		}
		if cerr := cc.close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) && ctx.Err() == nil {
			err = errors.Join(err, fmt.Errorf("nbd: close connection: %w", cerr))
		}
	}()
	cs := &conn{
		s:   s,
		log: s.logger().With(zap.String("remote", remoteAddr(c))),
		r:   bufio.NewReaderSize(c, 128<<10),
		w:   bufio.NewWriterSize(c, 128<<10),
	}
	done, err := cs.handshake()
	if err != nil || done {
		return err
	}
	return cs.transmit()
}

// handshake runs the fixed newstyle negotiation. It returns done when the
// client ended the session during the option phase.
func (cs *conn) handshake() (done bool, err error) {
	greet := binary.BigEndian.AppendUint64(nil, magicInit)
	greet = binary.BigEndian.AppendUint64(greet, magicOpt)
	greet = binary.BigEndian.AppendUint16(greet, flagFixedNewstyle|flagNoZeroes)
	if err := cs.send(greet); err != nil {
		return false, fmt.Errorf("nbd: send greeting: %w", err)
	}
	var cf [4]byte
	if _, err := io.ReadFull(cs.r, cf[:]); err != nil {
		return false, fmt.Errorf("nbd: read client flags: %w", err)
	}
	flags := binary.BigEndian.Uint32(cf[:])
	if flags&^clientFlagsKnown != 0 || flags&clientFlagFixedNewstyle == 0 {
		return false, fmt.Errorf("%w: client flags %#x", ErrProtocol, flags)
	}
	cs.noZeroes = flags&clientFlagNoZeroes != 0

	hdr := make([]byte, optionHeaderLen)
	for {
		if _, err := io.ReadFull(cs.r, hdr); err != nil {
			return false, fmt.Errorf("nbd: read option: %w", err)
		}
		opt, err := parseOptionHeader(hdr)
		if err != nil {
			return false, err
		}
		data := make([]byte, opt.Len)
		if _, err := io.ReadFull(cs.r, data); err != nil {
			return false, fmt.Errorf("nbd: read option %d data: %w", opt.Code, err)
		}
		done, enter, err := cs.option(opt.Code, data)
		if err != nil || done || enter {
			return done, err
		}
	}
}

// option answers one option. enter reports that the transmission phase
// starts; done that the client aborted.
func (cs *conn) option(code uint32, data []byte) (done, enter bool, err error) {
	size := cs.s.Backend.Size()
	switch code {
	case optExportName:
		if !cs.nameOK(string(data)) {
			// This option has no error reply: the protocol says to hang up.
			return false, false, fmt.Errorf("nbd: client asked for unknown export %q", data)
		}
		b := binary.BigEndian.AppendUint64(nil, uint64(size))
		b = binary.BigEndian.AppendUint16(b, transmissionFlags)
		if !cs.noZeroes {
			b = append(b, make([]byte, 124)...)
		}
		if err := cs.send(b); err != nil {
			return false, false, fmt.Errorf("nbd: reply to export name: %w", err)
		}
		return false, true, nil
	case optAbort:
		// The client may hang up without reading the ack, so a failure to
		// send it is not an error of the session.
		if err := cs.send(appendOptionReply(nil, code, repAck, nil)); err != nil {
			cs.log.Debug("abort ack not delivered", zap.Error(err))
		}
		return true, false, nil
	case optList:
		if len(data) != 0 {
			return false, false, cs.optionReply(code, repErrInvalid, []byte("NBD_OPT_LIST takes no data"))
		}
		name := binary.BigEndian.AppendUint32(nil, uint32(len(cs.s.Name)))
		name = append(name, cs.s.Name...)
		b := appendOptionReply(nil, code, repServer, name)
		b = appendOptionReply(b, code, repAck, nil)
		if err := cs.send(b); err != nil {
			return false, false, fmt.Errorf("nbd: reply to list: %w", err)
		}
		return false, false, nil
	case optInfo, optGo:
		req, err := parseInfoRequest(data)
		if err != nil {
			return false, false, cs.optionReply(code, repErrInvalid, []byte(err.Error()))
		}
		if !cs.nameOK(req.Name) {
			return false, false, cs.optionReply(code, repErrUnknown, []byte("unknown export"))
		}
		export := binary.BigEndian.AppendUint16(nil, infoExport)
		export = binary.BigEndian.AppendUint64(export, uint64(size))
		export = binary.BigEndian.AppendUint16(export, transmissionFlags)
		bs := binary.BigEndian.AppendUint16(nil, infoBlockSize)
		bs = binary.BigEndian.AppendUint32(bs, 1)
		bs = binary.BigEndian.AppendUint32(bs, PreferredBlockSize)
		bs = binary.BigEndian.AppendUint32(bs, MaxPayload)
		b := appendOptionReply(nil, code, repInfo, export)
		b = appendOptionReply(b, code, repInfo, bs)
		b = appendOptionReply(b, code, repAck, nil)
		if err := cs.send(b); err != nil {
			return false, false, fmt.Errorf("nbd: reply to option %d: %w", code, err)
		}
		return false, code == optGo, nil
	default: // STARTTLS, STRUCTURED_REPLY, *_META_CONTEXT, EXTENDED_HEADERS, unknown
		return false, false, cs.optionReply(code, repErrUnsup, nil)
	}
}

// nameOK reports whether name selects the export.
func (cs *conn) nameOK(name string) bool { return name == "" || name == cs.s.Name }

func (cs *conn) optionReply(code, typ uint32, data []byte) error {
	if err := cs.send(appendOptionReply(nil, code, typ, data)); err != nil {
		return fmt.Errorf("nbd: reply to option %d: %w", code, err)
	}
	return nil
}

// send writes b and flushes it to the peer.
func (cs *conn) send(b []byte) error {
	if _, err := cs.w.Write(b); err != nil {
		return err
	}
	return cs.w.Flush()
}

// transmit serves requests until the client disconnects or the stream fails.
func (cs *conn) transmit() error {
	size := cs.s.Backend.Size()
	hdr := make([]byte, requestHeaderLen)
	for {
		if _, err := io.ReadFull(cs.r, hdr); err != nil {
			if errors.Is(err, io.EOF) {
				cs.log.Debug("client hung up without NBD_CMD_DISC")
				return nil
			}
			return fmt.Errorf("nbd: read request: %w", err)
		}
		req, err := parseRequestHeader(hdr)
		if err != nil {
			return err
		}
		t0 := time.Now()
		act, errno := req.check(size)
		switch act {
		case actDisconnect:
			return nil
		case actAbort:
			return fmt.Errorf("%w: command %d of %d bytes at %d", ErrProtocol, req.Type, req.Length, req.Offset)
		case actReject:
			if req.Type == cmdWrite {
				if _, err := io.CopyN(io.Discard, cs.r, int64(req.Length)); err != nil {
					return fmt.Errorf("nbd: skip write payload: %w", err)
				}
			}
			if err := cs.reply(errno, req.Cookie, nil); err != nil {
				return err
			}
			cs.s.stats.rejected.Add(1)
		case actServe:
			if err := cs.serve(req); err != nil {
				return err
			}
			cs.s.stats.count(req.Type, int64(req.Length))
		}
		cs.s.stats.since(t0)
	}
}

// serve carries out a checked request and replies. It returns an error only
// when the connection itself fails; backend errors become EIO replies.
func (cs *conn) serve(req request) error {
	b := cs.s.Backend
	off := int64(req.Offset)
	n := int(req.Length)
	switch req.Type {
	case cmdRead:
		buf := cs.payload(n)
		got, err := b.ReadAt(buf, off)
		if got < n || (err != nil && !errors.Is(err, io.EOF)) {
			cs.log.Warn("backend read failed", zap.Int64("offset", off), zap.Int("length", n), zap.Error(err))
			return cs.reply(errnoIO, req.Cookie, nil)
		}
		return cs.reply(errnoOK, req.Cookie, buf)
	case cmdWrite:
		buf, err := cs.readPayload(n)
		if err != nil {
			return fmt.Errorf("nbd: read write payload: %w", err)
		}
		if _, err := b.WriteAt(buf, off); err != nil {
			cs.log.Warn("backend write failed", zap.Int64("offset", off), zap.Int("length", n), zap.Error(err))
			return cs.reply(errnoIO, req.Cookie, nil)
		}
		return cs.reply(cs.fua(req), req.Cookie, nil)
	case cmdWriteZeroes:
		zero := cs.payload(min(n, 1<<20))
		clear(zero)
		for done := 0; done < n; {
			chunk := zero[:min(len(zero), n-done)]
			if _, err := b.WriteAt(chunk, off+int64(done)); err != nil {
				cs.log.Warn("backend write zeroes failed", zap.Int64("offset", off), zap.Int("length", n), zap.Error(err))
				return cs.reply(errnoIO, req.Cookie, nil)
			}
			done += len(chunk)
		}
		return cs.reply(cs.fua(req), req.Cookie, nil)
	case cmdFlush:
		return cs.reply(cs.flush(), req.Cookie, nil)
	default:
		// check only lets the commands above through.
		return cs.reply(errnoInval, req.Cookie, nil)
	}
}

// fua flushes after a write that carried NBD_CMD_FLAG_FUA and returns the errno.
func (cs *conn) fua(req request) uint32 {
	if req.Flags&cmdFlagFUA == 0 {
		return errnoOK
	}
	return cs.flush()
}

// flush flushes the backend, if it can, and returns the errno for the reply.
func (cs *conn) flush() uint32 {
	f, ok := cs.s.Backend.(Flusher)
	if !ok {
		return errnoOK
	}
	if err := f.Flush(); err != nil {
		cs.log.Warn("backend flush failed", zap.Error(err))
		return errnoIO
	}
	return errnoOK
}

// reply sends a simple reply; data follows it only when errno is 0.
func (cs *conn) reply(errno uint32, cookie uint64, data []byte) error {
	var hdr [16]byte
	if _, err := cs.w.Write(appendSimpleReply(hdr[:0], errno, cookie)); err != nil {
		return fmt.Errorf("nbd: send reply: %w", err)
	}
	if errno == errnoOK && len(data) > 0 {
		if _, err := cs.w.Write(data); err != nil {
			return fmt.Errorf("nbd: send reply: %w", err)
		}
	}
	if err := cs.w.Flush(); err != nil {
		return fmt.Errorf("nbd: send reply: %w", err)
	}
	return nil
}

// payload returns the connection's buffer resized to n bytes.
func (cs *conn) payload(n int) []byte {
	cs.buf = slices.Grow(cs.buf[:0], n)[:n]
	return cs.buf
}

// readPayload reads n bytes from the client. The buffer grows only as data
// arrives, so a client announcing a large write it never sends costs little.
func (cs *conn) readPayload(n int) ([]byte, error) {
	buf := cs.buf[:0]
	for len(buf) < n {
		step := min(n-len(buf), 1<<20)
		buf = slices.Grow(buf, step)
		got, err := io.ReadFull(cs.r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+got]
		if err != nil {
			cs.buf = buf
			return nil, err
		}
	}
	cs.buf = buf
	return buf, nil
}

// Listen creates a unix socket listener at path with mode 0600. A stale
// socket file at path is removed first; any other file there is an error.
// Closing the listener removes the socket file.
func Listen(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() == os.ModeSocket:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("nbd: remove stale socket: %w", err)
		}
	case err == nil:
		return nil, fmt.Errorf("nbd: listen %s: %w (not a socket)", path, os.ErrExist)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("nbd: listen: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("nbd: listen: %w", err)
	}
	// The socket is created with 0777 &^ umask; connecting needs write
	// permission, which the usual umask (022) already withholds from others.
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("nbd: chmod socket: %w", err), l.Close())
	}
	return l, nil
}
