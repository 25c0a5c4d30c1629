package session

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/vmm"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Input limits.
const (
	maxPath        = 4096
	maxWrite       = 64 << 20              // bytes one Write may fill
	maxWriteData   = agent.MaxFrame - 4096 // inline data must fit one agent frame
	maxRead        = 1 << 20
	defaultRead    = 64 << 10
	defaultEvents  = 100
	maxEvents      = 1000
	maxXattrValue  = 64 << 10
	maxSymlinkDest = 4096
)

// LaneResult is one lane's outcome of an operation.
type LaneResult struct {
	Lane  string `json:"lane"`
	Errno int32  `json:"errno,omitempty"` // errno in the guest, 0 on success
	Error string `json:"error,omitempty"`
	Ret   int64  `json:"ret,omitempty"`
	// Agent is the agent's own time on the op (Response.agent_ns; Run.Step
	// only, a global op's on its first lane). For profiles: not in JSON.
	Agent time.Duration `json:"-"`
}

// LaneFingerprint is one lane's fingerprint.
type LaneFingerprint struct {
	Lane    string
	Root    []byte
	Entries uint64
	Leaves  []*agentv1.Entry // only when asked for
	// BelowRoot, BelowEntries and BelowLeaves are an overlay lane's
	// fingerprint from below: its upper layer, kernel whiteouts and opaque
	// directories classified into dialect-free symbolic entries
	// (agentv1.Fingerprint.below). Nil and zero for other lanes.
	BelowRoot    []byte
	BelowEntries uint64
	BelowLeaves  []*agentv1.Entry // only when leaves are asked for
}

// Event is one ledger record of something that happened to a session.
type Event struct {
	Seq     int64
	Session string
	Time    time.Time
	// Kind: "session.created", "op", "fork", "restore", "restored_file",
	// "checkpoint.evicted", "checkpoint.deleted", "session.ended", "session.failed", ...
	Kind       string
	Detail     string
	Results    []LaneResult
	Checkpoint string
}

// CheckPath validates a lane-relative path: relative, slash-separated, no
// "." or ".." or empty components, no NUL, at most 4096 bytes. The empty path
// is the lane root.
func CheckPath(field, p string) error {
	switch {
	case len(p) > maxPath:
		return errkind.Invalid(field, "%d bytes: at most %d", len(p), maxPath)
	case strings.IndexByte(p, 0) >= 0:
		return errkind.Invalid(field, "contains NUL")
	case strings.HasPrefix(p, "/"):
		return errkind.Invalid(field, "%q: must be relative to the lane", p)
	case p == "":
		return nil
	}
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "..":
			return errkind.Invalid(field, "%q: \"..\" is not allowed", p)
		case ".", "":
			return errkind.Invalid(field, "%q: empty or \".\" component", p)
		}
	}
	return nil
}

// checkLane validates a lane name of s.
func (s *session) checkLane(field, lane string) error {
	if lane == "" {
		return errkind.Invalid(field, "required")
	}
	for _, sp := range s.specs {
		if sp.Name == lane {
			return nil
		}
	}
	return errkind.Invalid(field, "no lane %q in session %s", lane, s.info.ID)
}

// laneOps are the operations Apply runs; global ones run once, not per lane.
var laneOps = map[string]bool{
	"create": true, "write": true, "truncate": true, "unlink": true, "mkdir": true, "rmdir": true,
	"chmod": true, "chown": true, "setxattr": true, "removexattr": true, "rename": true, "link": true,
	"symlink": true, "utimens": true, "fsync": true, "umount": true, "mount": true,
}
var globalOps = map[string]bool{"sync": true, "drop_caches": true, "set_clock": true}

// ValidateOp checks an operation as Apply does and returns its kind (the
// oneof field name: "mkdir", "sync", ...) and whether it is global (sync,
// drop_caches, set_clock: run once, not per lane). A bad op is a errkind.FieldError.
func ValidateOp(op *agentv1.Request) (kind string, global bool, err error) {
	kind, _, err = validateOp(op)
	return kind, globalOps[kind], err
}

// validateOp checks an operation for Apply and returns its kind (the oneof field name).
func validateOp(op *agentv1.Request) (string, protoreflect.Message, error) {
	if op == nil {
		return "", nil, errkind.Invalid("op", "required")
	}
	r := op.ProtoReflect()
	fd := r.WhichOneof(r.Descriptor().Oneofs().ByName("op"))
	if fd == nil {
		return "", nil, errkind.Invalid("op", "no operation set")
	}
	kind := string(fd.Name())
	if !laneOps[kind] && !globalOps[kind] {
		return "", nil, errkind.Invalid("op", "%s is not an operation Apply runs", kind)
	}
	msg := r.Get(fd).Message()
	f := func(name string) string { return "op." + kind + "." + name }
	fields := msg.Descriptor().Fields()
	for _, name := range []string{"path", "new_path"} {
		if fd := fields.ByName(protoreflect.Name(name)); fd != nil {
			if err := CheckPath(f(name), msg.Get(fd).String()); err != nil {
				return "", nil, err
			}
		}
	}
	switch o := msg.Interface().(type) {
	case *agentv1.Write:
		switch {
		case o.GetOffset() < 0:
			return "", nil, errkind.Invalid(f("offset"), "%d: negative", o.GetOffset())
		case o.GetSize() < 0:
			return "", nil, errkind.Invalid(f("size"), "%d: negative", o.GetSize())
		case o.GetSize() > maxWrite:
			return "", nil, errkind.Invalid(f("size"), "%d bytes: at most %d", o.GetSize(), maxWrite)
		case len(o.GetData()) > maxWriteData:
			return "", nil, errkind.Invalid(f("data"), "%d bytes: at most %d", len(o.GetData()), maxWriteData)
		case o.GetFill() > 0xff:
			return "", nil, errkind.Invalid(f("fill"), "%d: want a byte", o.GetFill())
		}
	case *agentv1.Truncate:
		if o.GetLength() < 0 {
			return "", nil, errkind.Invalid(f("length"), "%d: negative", o.GetLength())
		}
	case *agentv1.Setxattr:
		if len(o.GetValue()) > maxXattrValue {
			return "", nil, errkind.Invalid(f("value"), "%d bytes: at most %d", len(o.GetValue()), maxXattrValue)
		}
		if o.GetName() == "" {
			return "", nil, errkind.Invalid(f("name"), "required")
		}
	case *agentv1.Removexattr:
		if o.GetName() == "" {
			return "", nil, errkind.Invalid(f("name"), "required")
		}
	case *agentv1.Symlink:
		if len(o.GetTarget()) > maxSymlinkDest || strings.IndexByte(o.GetTarget(), 0) >= 0 {
			return "", nil, errkind.Invalid(f("target"), "at most %d bytes, no NUL", maxSymlinkDest)
		}
	case *agentv1.Mount:
		if o.GetDevice() != "" || o.GetFstype() != "" {
			return "", nil, errkind.Invalid(f("device"), "set by the session; a Mount op only remounts a lane")
		}
	case *agentv1.DropCaches:
		if o.GetLevel() < 1 || o.GetLevel() > 3 {
			return "", nil, errkind.Invalid(f("level"), "%d: want 1, 2 or 3", o.GetLevel())
		}
	case *agentv1.SetClock:
		if o.GetTime() == nil {
			return "", nil, errkind.Invalid(f("time"), "required")
		}
	}
	return kind, msg, nil
}

// Apply runs one operation on every lane of a session (global operations —
// sync, drop_caches, set_clock — once, with lane ""). The lane field of op is
// set per lane; op itself is not modified.
func (m *Manager) Apply(ctx context.Context, sessionID string, op *agentv1.Request) ([]LaneResult, error) {
	kind, msg, err := validateOp(op)
	if err != nil {
		return nil, err
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer s.unlock()
	lanes := []string{""}
	if laneOps[kind] {
		lanes = lanes[:0]
		for _, sp := range s.specs {
			lanes = append(lanes, sp.Name)
		}
	}
	var results []LaneResult
	for _, lane := range lanes {
		resp, err := m.call(ctx, s, kind, withLane(op, kind, lane))
		if err != nil {
			if s.info.State.live() {
				m.event(ctx, Event{Session: s.info.ID, Kind: "op.failed", Detail: err.Error(), Results: results})
			}
			return nil, err
		}
		results = append(results, LaneResult{Lane: lane, Errno: resp.GetErrno(), Error: resp.GetError(), Ret: resp.GetRet()})
	}
	m.ops.Add(1)
	m.event(ctx, Event{Session: s.info.ID, Kind: "op", Detail: describeOp(kind, msg, len(lanes)), Results: results})
	return results, nil
}

// describeOp is an event's human summary: "mkdir d-00 on 2 lanes".
func describeOp(kind string, msg protoreflect.Message, lanes int) string {
	var b strings.Builder
	b.WriteString(kind)
	fields := msg.Descriptor().Fields()
	for _, name := range []string{"path", "new_path"} {
		if fd := fields.ByName(protoreflect.Name(name)); fd != nil {
			fmt.Fprintf(&b, " %q", msg.Get(fd).String())
		}
	}
	if lanes > 1 {
		fmt.Fprintf(&b, " on %d lanes", lanes)
	}
	return b.String()
}

// Fingerprint fingerprints the given lanes of a session (empty: all).
func (m *Manager) Fingerprint(ctx context.Context, sessionID string, mode agentv1.TimeMode, leaves bool, lanes []string) ([]LaneFingerprint, error) {
	if _, ok := agentv1.TimeMode_name[int32(mode)]; !ok {
		return nil, errkind.Invalid("time_mode", "unknown time mode %d", mode)
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer s.unlock()
	if len(lanes) == 0 {
		for _, sp := range s.specs {
			lanes = append(lanes, sp.Name)
		}
	}
	for i, l := range lanes {
		if err := s.checkLane(fmt.Sprintf("lanes[%d]", i), l); err != nil {
			return nil, err
		}
	}
	out := make([]LaneFingerprint, 0, len(lanes))
	for _, l := range lanes {
		req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: l, TimeMode: mode, Leaves: leaves}}}
		resp, err := m.callOK(ctx, s, "fingerprint "+l, req)
		if err != nil {
			return nil, err
		}
		fp := resp.GetFingerprint()
		lf := LaneFingerprint{Lane: l, Root: fp.GetRoot(), Entries: fp.GetEntries(), Leaves: fp.GetLeaves()}
		if s.spec(l).IsOverlay() {
			req := &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: l, TimeMode: mode, Leaves: leaves, Below: true}}}
			resp, err := m.callOK(ctx, s, "fingerprint "+l+" from below", req)
			if err != nil {
				return nil, err
			}
			b := resp.GetFingerprint()
			lf.BelowRoot, lf.BelowEntries, lf.BelowLeaves = b.GetRoot(), b.GetEntries(), b.GetLeaves()
		}
		out = append(out, lf)
	}
	return out, nil
}

// spec returns the spec of the lane called name (the zero spec if none).
func (s *session) spec(name string) guest.LaneSpec {
	for _, sp := range s.specs {
		if sp.Name == name {
			return sp
		}
	}
	return guest.LaneSpec{}
}

// Stat is lstat (stat with follow) of a path in one lane. A failing system
// call is a result (res.Errno), not an error.
func (m *Manager) Stat(ctx context.Context, sessionID, lane, path string, follow bool) (*agentv1.StatResult, LaneResult, error) {
	if err := CheckPath("path", path); err != nil {
		return nil, LaneResult{}, err
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, LaneResult{}, err
	}
	defer s.unlock()
	if err := s.checkLane("lane", lane); err != nil {
		return nil, LaneResult{}, err
	}
	resp, err := m.call(ctx, s, "stat", &agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: lane, Path: path, Follow: follow}}})
	if err != nil {
		return nil, LaneResult{}, err
	}
	return resp.GetStat(), LaneResult{Lane: lane, Errno: resp.GetErrno(), Error: resp.GetError(), Ret: resp.GetRet()}, nil
}

// ReadFile reads up to length bytes (default 64 KiB, at most 1 MiB) at off.
// More bytes back than asked for is the agent's lie (agent.ErrBadResponse):
// it fails the session.
func (m *Manager) ReadFile(ctx context.Context, sessionID, lane, path string, off, length int64) (data []byte, eof bool, res LaneResult, err error) {
	if err := CheckPath("path", path); err != nil {
		return nil, false, res, err
	}
	switch {
	case off < 0:
		return nil, false, res, errkind.Invalid("offset", "%d: negative", off)
	case length < 0:
		return nil, false, res, errkind.Invalid("length", "%d: negative", length)
	case length > maxRead:
		return nil, false, res, errkind.Invalid("length", "%d: at most %d", length, maxRead)
	case length == 0:
		length = defaultRead
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, false, res, err
	}
	defer s.unlock()
	if err := s.checkLane("lane", lane); err != nil {
		return nil, false, res, err
	}
	resp, err := m.call(ctx, s, "read", &agentv1.Request{Op: &agentv1.Request_ReadFile{ReadFile: &agentv1.ReadFile{Lane: lane, Path: path, Offset: off, Length: length}}})
	if err != nil {
		return nil, false, res, err
	}
	if n := int64(len(resp.GetReadFile().GetData())); n > length {
		return nil, false, res, m.machineErr(s, "read "+lane+"/"+path, fmt.Errorf("%d bytes back, more than the %d asked: %w", n, length, agent.ErrBadResponse))
	}
	res = LaneResult{Lane: lane, Errno: resp.GetErrno(), Error: resp.GetError(), Ret: resp.GetRet()}
	return resp.GetReadFile().GetData(), resp.GetReadFile().GetEof(), res, nil
}

// Events returns a session's events with seq > afterSeq, oldest first
// (limit: default 100, at most 1000).
func (m *Manager) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Event, error) {
	switch {
	case sessionID == "":
		return nil, errkind.Invalid("session_id", "required")
	case limit < 0 || limit > maxEvents:
		return nil, errkind.Invalid("limit", "%d: want 0..%d", limit, maxEvents)
	case afterSeq < 0:
		return nil, errkind.Invalid("after_seq", "%d: negative", afterSeq)
	case limit == 0:
		limit = defaultEvents
	}
	if _, err := m.Get(ctx, sessionID); err != nil {
		return nil, err
	}
	return m.ledger.events(ctx, sessionID, afterSeq, limit)
}

// Hashes are a session's whole-machine digests at one moment: each lane's
// disk as the guest has written it (the overlay-resolved image; an overlay
// lane's upper layer), and all guest RAM where the backend can hash it.
type Hashes struct {
	Disks map[string][32]byte // by lane name
	// RAM is the blake3-256 of guest RAM; HasRAM is false where the
	// backend does not expose it (vmm.Hasher).
	RAM    [32]byte
	HasRAM bool
}

// Hashes returns the session's disk and RAM digests (replay fidelity:
// runs of one trace from one checkpoint leave equal digests only where
// nothing but the trace decides them). The disks are hashed as written:
// what the guest still caches is not in them (sync first).
func (m *Manager) Hashes(ctx context.Context, sessionID string) (Hashes, error) {
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return Hashes{}, err
	}
	defer s.unlock()
	disks, err := s.diskHashes()
	if err != nil {
		return Hashes{}, err
	}
	h := Hashes{Disks: disks}
	if _, ok := s.mach.(vmm.Hasher); !ok {
		return h, nil
	}
	err = m.guestCall(ctx, s, "ram hash", func(ctx context.Context, mach vmm.Machine) error {
		var err error
		h.RAM, err = mach.(vmm.Hasher).RAMHash(ctx)
		return err
	})
	if err != nil {
		return Hashes{}, err
	}
	h.HasRAM = true
	return h, nil
}

// diskHashes hashes every lane's whole disk as written (overlay-resolved,
// blake3), by lane. s.mu is held.
func (s *session) diskHashes() (map[string][32]byte, error) {
	out := make(map[string][32]byte, len(s.specs))
	for i, sp := range s.specs {
		sum, err := s.devs[i].Hash()
		if err != nil {
			return nil, fmt.Errorf("session %s: lane %s: %w", s.info.ID, sp.Name, err)
		}
		out[sp.Name] = sum
	}
	return out, nil
}
