package faultagent

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Prefix starts the base name of a Stat path that arms a fault.
const Prefix = ".themis-fault-"

// Mode is a fault.
type Mode string

// The faults.
const (
	// Garbage replaces the arming Stat's response by a frame whose bytes
	// do not decode.
	Garbage Mode = "garbage"
	// Oversized replaces it by a frame header claiming agent.MaxFrame+1
	// bytes, and nothing after it.
	Oversized Mode = "oversized"
	// Stale sends StaleMany responses with an earlier id before it (more
	// than the host discards for one call).
	Stale Mode = "stale"
	// StaleFew sends StaleFewCount responses with an earlier id before it
	// (fewer than the host discards).
	StaleFew Mode = "stale-few"
	// Delay sends it after Options.Delay: a call that stays in flight.
	Delay Mode = "delay"
	// NegSize makes every later Fingerprint report each regular file with
	// size -1.
	NegSize Mode = "negsize"
	// Log starts an endless log: console lines, the first and every
	// eighth one Options.LongLine bytes long, and kernel log lines;
	// answers go on.
	Log Mode = "log"
)

// Modes are all the faults.
var Modes = []Mode{Garbage, Oversized, Stale, StaleFew, Delay, NegSize, Log}

// How many stale responses Stale and StaleFew send: the host discards at
// most 64 for one call (agent.Client).
const (
	StaleMany     = 100
	StaleFewCount = 8
)

// Defaults of Options.
const (
	DefaultDelay    = 2 * time.Second
	DefaultLongLine = 1<<20 + 4<<10 // past the 1 MiB token of a bufio.Scanner
	defaultKmsg     = "/dev/kmsg"
)

// kmsgLine is the length of each kernel log line Log writes: under the
// kernel's limit for one /dev/kmsg record (1 KiB less a prefix).
const kmsgLine = 900

// garbageFrame is a frame of six bytes that are not a message: a field tag
// whose varint never ends.
var garbageFrame = []byte{0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ArmPath is the base name whose Stat arms m.
func ArmPath(m Mode) string { return Prefix + string(m) }

// Options tune a Channel; zero values are the defaults.
type Options struct {
	// Console is where Log writes its console lines (default os.Stderr,
	// the guest's console).
	Console io.Writer
	// Kmsg is the kernel log device Log writes to (default /dev/kmsg;
	// "-": none).
	Kmsg string
	// Delay is how long Delay holds its response (default DefaultDelay).
	Delay time.Duration
	// LongLine is the length, in bytes, of Log's long console lines
	// (default DefaultLongLine).
	LongLine int
	// CrashOn names the requests on which the kernel crashes (CrashOn).
	CrashOn CrashOn
	// SysrqTrigger is the file "c" is written to for a crash (default
	// /proc/sysrq-trigger).
	SysrqTrigger string
	// LaneRoot is the directory of the lanes' mounts, for a freeze
	// (default /lanes, the agent's).
	LaneRoot string
	// Log receives what the Channel does; nil discards.
	Log *zap.Logger
}

// Channel is an agent channel that injects the faults armed through it.
type Channel struct {
	rw  io.ReadWriter
	opt Options
	log *zap.Logger

	in    []byte  // bytes read, not yet a whole frame
	out   []byte  // bytes written, not yet a whole frame
	armed []armed // arming Stats read, not yet answered
	// mounts are the ids of the Mounts read whose failure crashes the
	// kernel (CrashOn mountfail), not yet answered.
	mounts []uint64

	negSize bool

	stopOnce sync.Once
	stop     chan struct{} // closed by Close: the Log writer ends
	flooding sync.WaitGroup
}

// armed is an arming Stat: its id and mode.
type armed struct {
	id   uint64
	mode Mode
}

// Wrap returns rw with faults armed through it (see the package doc).
func Wrap(rw io.ReadWriter, o Options) *Channel {
	if o.Console == nil {
		o.Console = os.Stderr
	}
	if o.Kmsg == "" {
		o.Kmsg = defaultKmsg
	}
	if o.Delay <= 0 {
		o.Delay = DefaultDelay
	}
	if o.LongLine <= 0 {
		o.LongLine = DefaultLongLine
	}
	if o.SysrqTrigger == "" {
		o.SysrqTrigger = sysrqTrigger
	}
	if o.LaneRoot == "" {
		o.LaneRoot = laneRoot
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Channel{rw: rw, opt: o, log: log, stop: make(chan struct{})}
}

// Read implements io.Reader: it reads from the channel and notes the
// arming Stats among the whole request frames read so far.
func (c *Channel) Read(p []byte) (int, error) {
	n, err := c.rw.Read(p)
	if n > 0 {
		c.in = append(c.in, p[:n]...)
		c.scanRequests()
	}
	return n, err
}

// scanRequests takes the whole frames off c.in and arms what they ask for.
func (c *Channel) scanRequests() {
	for len(c.in) >= 4 {
		n := int(binary.BigEndian.Uint32(c.in))
		if n > agent.MaxFrame {
			// The server rejects it and stops serving this stream.
			c.in = nil
			return
		}
		if len(c.in) < 4+n {
			return
		}
		req := new(agentv1.Request)
		if err := proto.Unmarshal(c.in[4:4+n], req); err == nil {
			c.crashOn(req)
			if m, ok := armedBy(req); ok {
				c.log.Info("fault armed", zap.String("mode", string(m)), zap.Uint64("id", req.GetId()))
				c.armed = append(c.armed, armed{id: req.GetId(), mode: m})
			}
		}
		c.in = append([]byte(nil), c.in[4+n:]...)
	}
}

// crashOn does what the CrashOn says of req before it is served: a
// crash, a freeze, or a Mount whose answer to watch.
func (c *Channel) crashOn(req *agentv1.Request) {
	if c.opt.CrashOn == "" {
		return
	}
	crash, freeze := c.opt.CrashOn.before(req)
	for _, lane := range freeze {
		c.freeze(lane)
	}
	if crash {
		c.crash()
	}
	if c.opt.CrashOn.watchesMount(req) {
		c.mounts = append(c.mounts, req.GetId())
	}
}

// armedBy returns the mode a request arms: a Stat whose path's base name
// is Prefix and a known mode.
func armedBy(req *agentv1.Request) (Mode, bool) {
	st := req.GetStat()
	if st == nil {
		return "", false
	}
	name, ok := strings.CutPrefix(path.Base(st.GetPath()), Prefix)
	if !ok {
		return "", false
	}
	for _, m := range Modes {
		if Mode(name) == m {
			return m, true
		}
	}
	return "", false
}

// Write implements io.Writer: whole response frames go to the channel as
// the armed faults make them; the rest waits for its frame to complete.
func (c *Channel) Write(p []byte) (int, error) {
	c.out = append(c.out, p...)
	for len(c.out) >= 4 {
		n := int(binary.BigEndian.Uint32(c.out))
		if len(c.out) < 4+n {
			break
		}
		frame := c.out[:4+n]
		err := c.respond(frame)
		c.out = append([]byte(nil), c.out[4+n:]...)
		if err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// respond writes one response frame, faulted as armed.
func (c *Channel) respond(frame []byte) error {
	if len(c.armed) == 0 && !c.negSize && len(c.mounts) == 0 {
		return c.send(frame)
	}
	resp := new(agentv1.Response)
	if err := proto.Unmarshal(frame[4:], resp); err != nil {
		return c.send(frame) // not ours to judge
	}
	c.mountAnswered(resp)
	for i, a := range c.armed {
		if a.id == resp.GetId() {
			c.armed = append(c.armed[:i], c.armed[i+1:]...)
			return c.fault(a.mode, resp, frame)
		}
	}
	if c.negSize && negateSizes(resp) {
		return c.sendMessage(resp)
	}
	return c.send(frame)
}

// mountAnswered crashes the kernel when resp answers a watched Mount
// (CrashOn mountfail) with a failure, before the answer is sent.
func (c *Channel) mountAnswered(resp *agentv1.Response) {
	for i, id := range c.mounts {
		if id == resp.GetId() {
			c.mounts = append(c.mounts[:i], c.mounts[i+1:]...)
			if failed(resp) {
				c.crash()
			}
			return
		}
	}
}

// fault writes the armed Stat's response frame as mode m says.
func (c *Channel) fault(m Mode, resp *agentv1.Response, frame []byte) error {
	switch m {
	case Garbage:
		return c.send(garbageFrame)
	case Oversized:
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], agent.MaxFrame+1)
		return c.send(hdr[:])
	case Stale, StaleFew:
		count := StaleMany
		if m == StaleFew {
			count = StaleFewCount
		}
		if err := c.sendStale(resp.GetId(), count); err != nil {
			return err
		}
	case Delay:
		select {
		case <-time.After(c.opt.Delay):
		case <-c.stop:
		}
	case NegSize:
		c.negSize = true
	case Log:
		c.flooding.Add(1)
		go c.flood()
	}
	return c.send(frame)
}

// sendStale writes count responses with an id before id (ids start at 1;
// before the first there is none to go stale).
func (c *Channel) sendStale(id uint64, count int) error {
	if id <= 1 {
		return nil
	}
	for range count {
		if err := c.sendMessage(&agentv1.Response{Id: id - 1, Errno: int32(syscall.EIO), Error: "faultagent: stale"}); err != nil {
			return err
		}
	}
	return nil
}

// negateSizes sets size -1 on every regular file in resp's fingerprint and
// in those of a batch in it; it says whether it changed anything.
func negateSizes(resp *agentv1.Response) bool {
	changed := false
	fps := []*agentv1.FingerprintResult{resp.GetFingerprint()}
	for _, r := range resp.GetBatch().GetResponses() {
		fps = append(fps, r.GetFingerprint())
	}
	for _, fp := range fps {
		for _, e := range fp.GetLeaves() {
			if e.GetKind() == agentv1.Kind_KIND_REGULAR {
				e.Size = -1
				changed = true
			}
		}
	}
	return changed
}

// sendMessage writes m as one frame.
func (c *Channel) sendMessage(m proto.Message) error {
	if err := agent.WriteFrame(c.rw, m); err != nil {
		return fmt.Errorf("faultagent: %w", err)
	}
	return nil
}

// send writes b to the channel whole.
func (c *Channel) send(b []byte) error {
	n, err := c.rw.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("faultagent: write: %w", err)
	}
	return nil
}

// flood is the Log mode's writer: console lines and kernel log lines
// until Close. A write that fails is logged once per target and the
// writer slows down, so that a failing device does not spin.
func (c *Channel) flood() {
	defer c.flooding.Done()
	c.log.Info("endless log started", zap.Int("long_line", c.opt.LongLine))
	var kmsg io.Writer
	if c.opt.Kmsg != "-" {
		f, err := os.OpenFile(c.opt.Kmsg, os.O_WRONLY, 0)
		if err != nil {
			c.log.Warn("endless log: no kernel log", zap.String("path", c.opt.Kmsg), zap.Error(err))
		} else {
			defer func() {
				if err := f.Close(); err != nil {
					c.log.Warn("endless log: close the kernel log", zap.Error(err))
				}
			}()
			kmsg = f
		}
	}
	long := append(bytesOf('x', c.opt.LongLine), '\n')
	kline := string(bytesOf('k', kmsgLine))
	var consoleFailed, kmsgFailed bool
	for i := 0; ; i++ {
		select {
		case <-c.stop:
			return
		default:
		}
		line := []byte(fmt.Sprintf("themis-fault: log line %d\n", i))
		if i%8 == 0 {
			line = long
		}
		if _, err := c.opt.Console.Write(line); err != nil {
			if !consoleFailed {
				c.log.Warn("endless log: console write", zap.Error(err))
			}
			consoleFailed = true
			time.Sleep(100 * time.Millisecond)
		}
		if kmsg == nil {
			continue
		}
		// The kernel rate-limits /dev/kmsg writers (printk.devkmsg): past
		// a burst it drops their lines without an error.
		if _, err := fmt.Fprintf(kmsg, "<4>themis-fault: kmsg line %d %s\n", i, kline); err != nil && !kmsgFailed {
			c.log.Warn("endless log: kernel log write", zap.Error(err))
			kmsgFailed = true
		}
	}
}

// bytesOf returns n bytes b.
func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// Close stops the Log mode's writer and a Delay in progress, and waits for
// the writer to end. It does not close the channel. It is idempotent.
func (c *Channel) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	c.flooding.Wait()
	return nil
}
