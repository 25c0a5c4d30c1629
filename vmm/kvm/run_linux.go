package kvm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"

	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Run runs the vCPU until the guest halts (NoIRQChip), writes DebugExitPort,
// faults (an *ExitError wrapping ErrGuestFault, naming exit reason and RIP),
// or is paused by Pause or ctx (an *ExitError wrapping ErrPaused and ctx's
// error). After any of these the machine can be restored or run again.
func (m *VM) Run(ctx context.Context) (Exit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Exit{}, vmm.ErrClosed
	}
	m.pauseReq.Store(false)
	m.run[runImmediateExit] = 0
	reply := make(chan runResult, 1)
	m.runCh <- reply
	select {
	case r := <-reply:
		return r.exit, r.err
	case <-ctx.Done():
		if err := m.Pause(); err != nil {
			m.log.Warn("pause for context failed", zap.Error(err))
		}
		r := <-reply
		var ee *ExitError
		if errors.As(r.err, &ee) && errors.Is(ee.Err, ErrPaused) {
			ee.Detail = "context: " + context.Cause(ctx).Error()
			ee.Err = errors.Join(ErrPaused, context.Cause(ctx))
		}
		return r.exit, r.err
	}
}

// Pause makes a Run in progress return ErrPaused at once: it sets
// immediate_exit and sends SIGURG to the vCPU thread, which the Go runtime
// ignores but which makes KVM_RUN return EINTR. Without a Run in progress
// it does nothing lasting (the next Run clears the request).
func (m *VM) Pause() error {
	m.mapMu.RLock()
	defer m.mapMu.RUnlock()
	if m.run == nil {
		return vmm.ErrClosed
	}
	m.pauseReq.Store(true)
	m.run[runImmediateExit] = 1
	if tid := m.tid.Load(); tid != 0 {
		if err := unix.Tgkill(unix.Getpid(), int(tid), unix.SIGURG); err != nil {
			return fmt.Errorf("kvm: signal vcpu thread: %w", err)
		}
	}
	return nil
}

func (m *VM) vcpuThread(ready chan<- struct{}) {
	runtime.LockOSThread()
	// Never unlocked: the thread is discarded when this goroutine ends, with
	// whatever signal state the pauses left on it.
	m.tid.Store(int32(unix.Gettid()))
	close(ready)
	for reply := range m.runCh {
		e, err := m.runLoop()
		reply <- runResult{e, err}
	}
	m.tid.Store(0)
	close(m.threadDone)
}

func (m *VM) rip() uint64 {
	r, err := m.Regs()
	if err != nil {
		return ^uint64(0)
	}
	return r.RIP
}

func (m *VM) fault(reason, detail string) error {
	return &ExitError{Reason: reason, RIP: m.rip(), Detail: detail, Err: ErrGuestFault}
}

// settle completes a pending I/O exit without running guest code (KVM_RUN
// with immediate_exit), so that registers and RIP are consistent for a
// checkpoint or a restore.
func (m *VM) settle() error {
	m.run[runImmediateExit] = 1
	errno := runOnce(m.vcpuFD)
	if !m.pauseReq.Load() {
		m.run[runImmediateExit] = 0
	}
	switch errno {
	case unix.EINTR:
		return nil
	case 0:
		return fmt.Errorf("kvm: KVM_RUN with immediate_exit returned exit %d instead of EINTR", binary.LittleEndian.Uint32(m.run[runExitReason:]))
	default:
		return &IoctlError{Op: "KVM_RUN", Err: errno}
	}
}

// runLoop runs on the vCPU thread.
func (m *VM) runLoop() (Exit, error) {
	for {
		switch errno := runOnce(m.vcpuFD); errno {
		case 0:
		case unix.EINTR:
			if m.pauseReq.Load() {
				return Exit{}, &ExitError{Reason: "PAUSED", RIP: m.rip(), Err: ErrPaused}
			}
			continue // a signal meant for the Go runtime (preemption): go on
		case unix.EAGAIN:
			continue
		case unix.EFAULT:
			return Exit{}, &IoctlError{Op: "KVM_RUN", Err: fmt.Errorf("%w (guest memory not accessible)", errno)}
		default:
			return Exit{}, &IoctlError{Op: "KVM_RUN", Err: errno}
		}
		m.stats.Exits++
		reason := binary.LittleEndian.Uint32(m.run[runExitReason:])
		x := m.run[runExit:]
		switch reason {
		case exitIO:
			e, done, err := m.serveIO(x)
			if err != nil || done {
				if serr := m.settle(); serr != nil {
					return Exit{}, errors.Join(err, serr)
				}
				if done {
					e.RIP = m.rip()
				}
				return e, err
			}
		case exitHLT:
			return Exit{Reason: ExitHLT, RIP: m.rip()}, nil
		case exitMMIO:
			addr := binary.LittleEndian.Uint64(x[mmioExitPhysAddr:])
			n := binary.LittleEndian.Uint32(x[mmioExitLen:])
			dir := "read"
			if x[mmioExitIsWrite] != 0 {
				dir = "write"
			}
			err := m.fault("MMIO", fmt.Sprintf("%d-byte %s at guest-physical %#x: no device there (MMIO unsupported)", n, dir, addr))
			for i := range 8 {
				x[mmioExitData+i] = 0xff
			}
			return Exit{}, errors.Join(err, m.settle())
		case exitShutdown:
			return Exit{}, m.fault("SHUTDOWN", "triple fault")
		case exitFailEntry:
			return Exit{}, m.fault("FAIL_ENTRY", fmt.Sprintf("hardware entry failure reason %#x", binary.LittleEndian.Uint64(x[0:])))
		case exitInternalError:
			sub := binary.LittleEndian.Uint32(x[0:])
			nd := min(binary.LittleEndian.Uint32(x[4:]), 16)
			data := make([]uint64, nd)
			for i := range data {
				data[i] = binary.LittleEndian.Uint64(x[8+8*i:])
			}
			return Exit{}, m.fault("INTERNAL_ERROR", fmt.Sprintf("suberror %d%s, data %#x", sub, internalSuberror(sub), data))
		case exitSystemEvent:
			return Exit{}, m.fault("SYSTEM_EVENT", fmt.Sprintf("type %d", binary.LittleEndian.Uint32(x[0:])))
		case exitDirtyRingFull:
			if !m.ringFullOK {
				return Exit{}, fmt.Errorf("%w: DIRTY_RING_FULL exit at RIP %#x on a host without hardware virtualization, "+
					"whose kernel pushes past the soft limit; use a ring larger than the pages dirtied between checkpoints", ErrRingOverflow, m.rip())
			}
			// Harvest now, into the tree (or nowhere, before arm), to go on.
			before := m.ringNext
			if err := m.harvestRing(m.dirtyTarget()); err != nil {
				return Exit{}, err
			}
			if m.ringNext == before {
				return Exit{}, fmt.Errorf("%w: DIRTY_RING_FULL exit with no entry to harvest", ErrRingOverflow)
			}
		case exitIRQWindowOpen, exitIntr:
		default:
			name := exitNames[reason]
			if name == "" {
				name = fmt.Sprintf("exit %d", reason)
			}
			return Exit{}, m.fault(name, "exit reason not handled")
		}
	}
}

func internalSuberror(s uint32) string {
	switch s {
	case 1:
		return " (emulation failure)"
	case 2:
		return " (simultaneous exceptions)"
	case 3:
		return " (delivery event failure)"
	}
	return ""
}

// ioExit is a decoded KVM_EXIT_IO: count accesses of size bytes each to
// port, their data at off in kvm_run.
type ioExit struct {
	out         bool
	size, count int
	port        uint16
	off         int
}

// decodeIO reads the io member of kvm_run's exit union x.
func (m *VM) decodeIO(x []byte) (ioExit, error) {
	e := ioExit{
		out:   x[ioExitDirection] == 1,
		size:  int(x[ioExitSize]),
		port:  binary.LittleEndian.Uint16(x[ioExitPort:]),
		count: int(binary.LittleEndian.Uint32(x[ioExitCount:])),
		off:   int(binary.LittleEndian.Uint64(x[ioExitDataOffset:])),
	}
	if e.size != 1 && e.size != 2 && e.size != 4 || e.off+e.size*e.count > len(m.run) {
		return e, m.fault("IO", fmt.Sprintf("malformed I/O exit: port %#x size %d count %d", e.port, e.size, e.count))
	}
	return e, nil
}

// access is the data of access i of e, inside kvm_run.
func (m *VM) access(e ioExit, i int) []byte { return m.run[e.off+i*e.size : e.off+(i+1)*e.size] }

// word is access i of e as a little-endian value.
func (m *VM) word(e ioExit, i int) uint32 {
	var b [4]byte
	copy(b[:], m.access(e, i))
	return binary.LittleEndian.Uint32(b[:])
}

// serveIO serves one port I/O exit; done means Run should return e: the
// VM's own ports (the scratch register, the debug exit) first, then the
// attached devices.
func (m *VM) serveIO(x []byte) (exit Exit, done bool, err error) {
	e, err := m.decodeIO(x)
	if err != nil {
		return Exit{}, false, err
	}
	switch {
	case e.port == ScratchPort && e.out:
		for i := range e.count {
			m.scratch.Value = m.word(e, i)
			m.scratch.Writes++
		}
	case e.port == ScratchPort:
		for i := range e.count {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], m.scratch.Value)
			copy(m.access(e, i), b[:e.size])
		}
	case e.port == DebugExitPort && e.out:
		return Exit{Reason: ExitDebug, Code: m.word(e, e.count-1)}, true, nil
	case m.att != nil:
		return Exit{}, false, m.attachedIO(e)
	default:
		return Exit{}, false, m.unknownPort(e.port, e.out, e.size, e.count)
	}
	return Exit{}, false, nil
}

// attachedIO serves every access of e through the attached devices.
func (m *VM) attachedIO(e ioExit) error {
	for i := range e.count {
		handled, err := m.att.portIO(e.port, e.out, m.access(e, i))
		if err != nil {
			return m.fault("IO", fmt.Sprintf("port %#x: %v", e.port, err))
		}
		if !handled {
			return m.unknownPort(e.port, e.out, e.size, e.count)
		}
	}
	return nil
}

// unknownPort fails the run for an access to a port no device serves; an
// IN gets all ones, as on a bus with nothing there.
func (m *VM) unknownPort(port uint16, out bool, size, count int) error {
	dir := "OUT to"
	if !out {
		dir = "IN from"
		off := int(binary.LittleEndian.Uint64(m.run[runExit+ioExitDataOffset:]))
		for i := range size * count {
			m.run[off+i] = 0xff
		}
	}
	return m.fault("IO", fmt.Sprintf("%s unknown port %#x (size %d)", dir, port, size))
}
