package inguest

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Server is the guest side of the protocol. The zero value with Root set is
// ready to use; fields must not change once it serves.
type Server struct {
	// Root is the directory holding one directory per lane ("/lanes" in the
	// guest). A lane is usable when Root/<lane> is a directory and, if this
	// server unmounted it, it has been mounted again.
	Root string
	// Layers is the directory under which overlay lanes mount their layers
	// (Layers/<lane>/lower and Layers/<lane>/upper; "/layers" in the
	// guest). Empty means "layers" beside Root.
	Layers string
	// Log receives diagnostics; nil discards them.
	Log *zap.Logger
	// Version identifies the agent build in Ping results.
	Version string
	// Machine allows the operations that act on the whole machine: Mount,
	// Umount, SetClock, DropCaches and Exec. Only the guest's init sets it;
	// without it they fail with EPERM.
	Machine bool
	// LoadFS, when set, is called when a mount fails because the kernel
	// does not know the filesystem type (ENODEV); if it returns nil the
	// mount is tried once more. The guest's init loads the modules it
	// deferred at boot (the initramfs's /modules/lazy).
	LoadFS func(fstype string) error

	mu       sync.Mutex
	lanes    map[string]*laneState // by lane name; guarded by mu
	devices  map[string]string     // resolved "serial:<s>" -> /dev/<name>; guarded by mu (see device)
	sysBlock string                // where device looks up serials; empty: the guest's /sys/block (tests set it)

	testHook func(*agentv1.Request, *agentv1.Response) // called by Handle after the operation; tests only
}

// laneState is what the server remembers about a lane it mounted.
type laneState struct {
	cfg     *agentv1.Mount // device, fstype, options of the first mount
	mounted bool
}

func (s *Server) log() *zap.Logger {
	if s.Log == nil {
		return zap.NewNop()
	}
	return s.Log
}

// Serve reads requests from rw and writes one response to each until rw ends.
// It returns nil at a clean end of stream. A frame that does not decode gets
// a response with id 0 and EINVAL, and serving continues. An oversized frame
// length also gets that response, then Serve returns the error: the stream
// is no longer at a frame boundary. A response too large for a frame (a
// fingerprint with millions of leaves) is replaced by one with E2BIG. Other
// read and write errors are returned.
func (s *Server) Serve(rw io.ReadWriter) error {
	for {
		req := new(agentv1.Request)
		err := agent.ReadFrame(rw, req)
		switch {
		case err == nil:
			if err := s.reply(rw, s.Handle(req)); err != nil {
				return err
			}
			continue
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, agent.ErrDecode), errors.Is(err, agent.ErrFrameTooLarge):
			resp := &agentv1.Response{Errno: int32(syscall.EINVAL), Error: err.Error()}
			if werr := agent.WriteFrame(rw, resp); werr != nil {
				return fmt.Errorf("agent: serve: %w", werr)
			}
			if errors.Is(err, agent.ErrDecode) {
				s.log().Debug("agent: rejected a malformed frame", zap.Error(err))
				continue
			}
		}
		return fmt.Errorf("agent: serve: %w", err)
	}
}

// reply writes resp; a response too large for a frame is replaced by an
// E2BIG error response with the same id.
func (s *Server) reply(w io.Writer, resp *agentv1.Response) error {
	err := agent.WriteFrame(w, resp)
	if errors.Is(err, agent.ErrFrameTooLarge) {
		err = agent.WriteFrame(w, &agentv1.Response{
			Id:    resp.GetId(),
			Errno: int32(syscall.E2BIG),
			Error: fmt.Sprintf("response too large: %v", err),
		})
	}
	if err != nil {
		return fmt.Errorf("agent: serve: %w", err)
	}
	return nil
}

// Handle applies one request and returns its response. It never panics: a
// panic becomes a response with EIO and the panic's text.
func (s *Server) Handle(req *agentv1.Request) (resp *agentv1.Response) {
	defer func() {
		if p := recover(); p != nil {
			s.log().Error("agent: panic in handler", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			resp = &agentv1.Response{
				Id:    req.GetId(),
				Errno: int32(syscall.EIO),
				Error: fmt.Sprintf("agent: panic: %v", p),
			}
		}
	}()
	t0 := time.Now()
	resp = &agentv1.Response{Id: req.GetId()}
	if b, ok := req.GetOp().(*agentv1.Request_Batch); ok {
		s.batch(b.Batch, resp)
	} else {
		s.handle(req, resp)
	}
	resp.AgentNs = int64(time.Since(t0))
	if s.testHook != nil {
		s.testHook(req, resp)
	}
	return resp
}

// fail records err as resp's errno and message ("op path: text").
func fail(resp *agentv1.Response, op, path string, err error) {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno == 0 {
		errno = syscall.EIO
	}
	resp.Errno = int32(errno)
	if path != "" {
		resp.Error = fmt.Sprintf("%s %s: %v", op, path, err)
	} else {
		resp.Error = fmt.Sprintf("%s: %v", op, err)
	}
}

// errnoMsg is an error carrying an errno and a message of its own.
type errnoMsg struct {
	errno syscall.Errno
	msg   string
}

func (e *errnoMsg) Error() string { return e.msg }
func (e *errnoMsg) Unwrap() error { return e.errno }

func errorf(errno syscall.Errno, format string, args ...any) error {
	return &errnoMsg{errno: errno, msg: fmt.Sprintf(format, args...)}
}
