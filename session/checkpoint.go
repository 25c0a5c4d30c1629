package session

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/vmm"
	"github.com/zeebo/blake3"
)

// Origin says which pool a checkpoint belongs to.
type Origin string

// Checkpoint pools.
const (
	OriginManual Origin = "manual" // named or on demand; limited, never evicted
	OriginAuto   Origin = "auto"   // a ring; the oldest live one is evicted
)

// Checkpoint is one saved machine state of a session.
type Checkpoint struct {
	ID      string // "c-<n>", n increasing per session
	Session string
	Parent  string // the previous live checkpoint on the path ("" for the first)
	Name    string // optional, unique among live checkpoints
	Origin  Origin
	Slot    int // slot in its pool: the lowest free one at fork time
	Created time.Time
	// Roots are each lane's fingerprint root (TIME_MODE_ALL) at the checkpoint.
	Roots map[string][]byte
	// OverlayDepth is the overlay depth of the disks at the checkpoint.
	OverlayDepth int
	// Live is false once a restore to an ancestor, a delete, an eviction or
	// the end of the session dropped it.
	Live bool
}

func (c *Checkpoint) clone() *Checkpoint {
	cc := *c
	cc.Roots = make(map[string][]byte, len(c.Roots))
	for k, v := range c.Roots {
		cc.Roots[k] = append([]byte(nil), v...)
	}
	return &cc
}

// Limits of the file content kept for RestoreFile.
const (
	maxKeptFile     = 64 << 20  // larger files are fingerprinted but not kept; at most the agent's sparseFrom, past which a content hash is not the blake3 of the bytes
	maxKeptPerSess  = 512 << 20 // content kept per session
	readChunk       = 1 << 20   // the agent's ReadFile cap
	maxNameLen      = 128
	maxRestoreBytes = maxKeptFile
)

// snapshot is what a checkpoint keeps of each lane's files for RestoreFile:
// lane -> path -> entry. Regular files' content lives in session.blobs.
type snapshot map[string]map[string]fileRec

type fileRec struct {
	kind   agentv1.Kind
	mode   uint32
	size   int64
	hash   string // hex blake3 of the content (regular files)
	target string // symlinks
}

var idLike = regexp.MustCompile(`^[cs]-[0-9a-f]+$`)

func validateName(name string) error {
	if name == "" {
		return nil
	}
	if len(name) > maxNameLen {
		return errkind.Invalid("name", "%d bytes: at most %d", len(name), maxNameLen)
	}
	if idLike.MatchString(name) {
		return errkind.Invalid("name", "%q looks like a checkpoint id", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return errkind.Invalid("name", "%q contains a non-printable character", name)
		}
	}
	return nil
}

// resolve finds a checkpoint of s by id or name (live names win).
func (s *session) resolve(ref string) (*Checkpoint, error) {
	if ref == "" {
		return nil, errkind.Invalid("checkpoint", "required")
	}
	var byName *Checkpoint
	for _, c := range s.cps {
		if c.ID == ref {
			return c, nil
		}
		if c.Name == ref && (byName == nil || c.Live) {
			byName = c
		}
	}
	if byName != nil {
		return byName, nil
	}
	return nil, fmt.Errorf("checkpoint %q of session %s: %w", ref, s.info.ID, errkind.ErrNotFound)
}

func (s *session) live() []*Checkpoint {
	var out []*Checkpoint
	for _, c := range s.cps {
		if c.Live {
			out = append(out, c)
		}
	}
	return out
}

// Fork checkpoints a session's whole machine. A manual fork past the pool
// limit is errkind.ErrExhausted; an auto fork past the ring size evicts the oldest
// live auto checkpoint first.
func (m *Manager) Fork(ctx context.Context, sessionID, name string, origin Origin) (*Checkpoint, error) {
	origin, err := checkOrigin(origin)
	if err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer s.unlock()
	if err := m.makeRoom(ctx, s, name, origin); err != nil {
		return nil, err
	}
	roots, snap, err := m.snapshotLanes(ctx, s)
	if err != nil {
		return nil, err
	}
	vid, err := m.checkpointMachine(ctx, s)
	if err != nil {
		return nil, err
	}
	c := s.newCheckpoint(name, origin, roots)
	if err := m.recordCheckpoint(ctx, s, c, vid); err != nil {
		return nil, err
	}
	s.seq++
	s.cps = append(s.cps, c)
	s.vmmID[c.ID] = vid
	s.files[c.ID] = snap
	s.info.Depth = len(s.live())
	m.forks.Add(1)
	detail := fmt.Sprintf("%s (%s, slot %d)", c.ID, origin, c.Slot)
	if name != "" {
		detail = fmt.Sprintf("%s %q (%s, slot %d)", c.ID, name, origin, c.Slot)
	}
	m.event(ctx, Event{Session: s.info.ID, Kind: "fork", Detail: detail, Checkpoint: c.ID})
	return c.clone(), nil
}

// checkOrigin returns origin, manual when empty, or an error naming the field.
func checkOrigin(origin Origin) (Origin, error) {
	switch origin {
	case "":
		return OriginManual, nil
	case OriginManual, OriginAuto:
		return origin, nil
	default:
		return "", errkind.Invalid("origin", "%q: want %q or %q", origin, OriginManual, OriginAuto)
	}
}

// makeRoom checks that name is free among s's live checkpoints and that
// origin's pool has room: a full manual pool is an error, a full auto
// ring drops its oldest checkpoint.
func (m *Manager) makeRoom(ctx context.Context, s *session, name string, origin Origin) error {
	live := s.live()
	pool := 0
	for _, c := range live {
		if name != "" && c.Name == name {
			return errkind.Invalid("name", "%q already names live checkpoint %s", name, c.ID)
		}
		if c.Origin == origin {
			pool++
		}
	}
	limit := m.cfg.ManualCheckpoints
	if origin == OriginAuto {
		limit = m.cfg.AutoCheckpoints
	}
	if pool < limit {
		return nil
	}
	if origin == OriginManual {
		return fmt.Errorf("manual checkpoint pool full (%d); delete one: %w", limit, errkind.ErrExhausted)
	}
	for _, c := range live {
		if c.Origin == OriginAuto {
			return m.dropCheckpoint(ctx, s, c, "checkpoint.evicted", fmt.Sprintf("%s evicted from the auto ring (%d)", c.ID, limit))
		}
	}
	return nil
}

// checkpointMachine checkpoints s's machine; a checkpoint whose RAM does
// not fit the budget is deleted again and the session stays.
func (m *Manager) checkpointMachine(ctx context.Context, s *session) (vmm.CheckpointID, error) {
	var vid vmm.CheckpointID
	err := m.guestCall(ctx, s, "fork", func(ctx context.Context, mach vmm.Machine) error {
		var err error
		if vid, err = mach.Checkpoint(ctx); err != nil {
			return err
		}
		if err := s.syncCheckpointRAM(); err != nil {
			return errors.Join(fmt.Errorf("fork refused: %w", err), mach.Delete(ctx, vid), s.syncCheckpointRAM())
		}
		return nil
	})
	return vid, err
}

// newCheckpoint is the record of s's next checkpoint: its ID, its parent
// (the newest live one) and the lowest slot free in origin's pool.
func (s *session) newCheckpoint(name string, origin Origin, roots map[string][]byte) *Checkpoint {
	used := make(map[int]bool)
	var parent string
	for _, c := range s.live() {
		if c.Origin == origin {
			used[c.Slot] = true
		}
		parent = c.ID
	}
	slot := 0
	for used[slot] {
		slot++
	}
	c := &Checkpoint{ID: "c-" + strconv.Itoa(s.seq+1), Session: s.info.ID, Parent: parent, Name: name, Origin: origin,
		Slot: slot, Created: time.Now().UTC(), Roots: roots, Live: true}
	if len(s.devs) > 0 {
		c.OverlayDepth = s.devs[0].Depth()
	}
	return c
}

// recordCheckpoint inserts c into the ledger before the session adopts it; when the
// insert fails the machine's checkpoint vid is deleted again, so a Fork
// fails whole.
func (m *Manager) recordCheckpoint(ctx context.Context, s *session, c *Checkpoint, vid vmm.CheckpointID) error {
	err := m.ledger.insertCheckpoint(context.WithoutCancel(ctx), c, s.seq+1)
	if err == nil {
		return nil
	}
	undo := m.guestCall(ctx, s, "fork (undo)", func(ctx context.Context, mach vmm.Machine) error {
		err := mach.Delete(ctx, vid)
		m.shrinkCheckpointRAM(s)
		return err
	})
	s.gcBlobs()
	return errors.Join(err, undo)
}

// dropCheckpoint deletes a live checkpoint from the machine (merging it into
// its neighbours), fixes the parent and depth of those above it, and records
// an event. s.mu is held.
func (m *Manager) dropCheckpoint(ctx context.Context, s *session, c *Checkpoint, kind, detail string) error {
	if err := m.guestCall(ctx, s, "delete checkpoint "+c.ID, func(ctx context.Context, mach vmm.Machine) error {
		if err := mach.Delete(ctx, s.vmmID[c.ID]); err != nil {
			return err
		}
		m.shrinkCheckpointRAM(s)
		return nil
	}); err != nil {
		if errors.Is(err, vmm.ErrUnknownCheckpoint) {
			return fmt.Errorf("checkpoint %s not on the current path: %w", c.ID, errkind.ErrState)
		}
		return err
	}
	c.Live = false
	delete(s.vmmID, c.ID)
	delete(s.files, c.ID)
	changed := []*Checkpoint{c}
	above := false
	for _, o := range s.cps {
		if o == c {
			above = true
			continue
		}
		if !above || !o.Live {
			continue
		}
		if o.Parent == c.ID {
			o.Parent = c.Parent
		}
		o.OverlayDepth--
		changed = append(changed, o)
	}
	s.gcBlobs()
	s.info.Depth = len(s.live())
	for _, o := range changed {
		if err := m.ledger.updateCheckpoint(context.WithoutCancel(ctx), o); err != nil {
			return err
		}
	}
	m.event(ctx, Event{Session: s.info.ID, Kind: kind, Detail: detail, Checkpoint: c.ID})
	return nil
}

// Restore returns a session's machine to a live checkpoint (by id or name);
// the checkpoints above it stop being live. It returns the checkpoint and how
// long the restore took.
func (m *Manager) Restore(ctx context.Context, sessionID, ref string) (*Checkpoint, time.Duration, error) {
	if ref == "" {
		return nil, 0, errkind.Invalid("checkpoint", "required")
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, 0, err
	}
	defer s.unlock()
	c, err := s.resolve(ref)
	if err != nil {
		return nil, 0, err
	}
	if !c.Live {
		return nil, 0, fmt.Errorf("checkpoint %s not on the current path: %w", c.ID, errkind.ErrState)
	}
	t0 := time.Now()
	if err := m.guestCall(ctx, s, "restore "+c.ID, func(ctx context.Context, mach vmm.Machine) error {
		if err := mach.Restore(ctx, s.vmmID[c.ID]); err != nil {
			return err
		}
		m.shrinkCheckpointRAM(s)
		return nil
	}); err != nil {
		if errors.Is(err, vmm.ErrUnknownCheckpoint) {
			return nil, 0, fmt.Errorf("checkpoint %s not on the current path: %w", c.ID, errkind.ErrState)
		}
		if s.info.State.live() {
			m.event(ctx, Event{Session: s.info.ID, Kind: "restore.failed", Detail: err.Error(), Checkpoint: c.ID})
		}
		return nil, 0, err
	}
	d := time.Since(t0)
	above := false
	for _, o := range s.cps {
		if o == c {
			above = true
			continue
		}
		if above && o.Live {
			o.Live = false
			delete(s.vmmID, o.ID)
			delete(s.files, o.ID)
			if err := m.ledger.updateCheckpoint(context.WithoutCancel(ctx), o); err != nil {
				return nil, 0, err
			}
		}
	}
	s.gcBlobs()
	s.info.Depth = len(s.live())
	m.restores.Add(1)
	if m.cfg.OnRestore != nil {
		m.cfg.OnRestore(d)
	}
	m.event(ctx, Event{Session: s.info.ID, Kind: "restore", Detail: fmt.Sprintf("%s in %s", c.ID, d.Round(time.Microsecond)), Checkpoint: c.ID})
	return c.clone(), d, nil
}

// Checkpoints lists a session's live checkpoints (with all, every one),
// oldest first, from its view (never waiting on a busy guest). Sessions
// that are no longer live are read from the ledger.
func (m *Manager) Checkpoints(ctx context.Context, sessionID string, all bool) ([]*Checkpoint, error) {
	if sessionID == "" {
		return nil, errkind.Invalid("session_id", "required")
	}
	m.mu.Lock()
	s := m.sessions[sessionID]
	m.mu.Unlock()
	if s != nil {
		if v := s.snapshot(); v.info.State.live() {
			var out []*Checkpoint
			for _, c := range v.cps {
				if all || c.Live {
					out = append(out, c.clone())
				}
			}
			return out, nil
		}
	}
	if _, err := m.ledger.session(ctx, sessionID); err != nil {
		return nil, err
	}
	return m.ledger.checkpoints(ctx, sessionID, all)
}

// DeleteCheckpoint removes a live checkpoint; its neighbours stay restorable.
func (m *Manager) DeleteCheckpoint(ctx context.Context, sessionID, ref string) error {
	if ref == "" {
		return errkind.Invalid("checkpoint", "required")
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return err
	}
	defer s.unlock()
	c, err := s.resolve(ref)
	if err != nil {
		return err
	}
	if !c.Live {
		return fmt.Errorf("checkpoint %s not on the current path: %w", c.ID, errkind.ErrState)
	}
	return m.dropCheckpoint(ctx, s, c, "checkpoint.deleted", c.ID+" deleted")
}

// call runs one request on the machine under its deadline (guestCall). The
// response's errno is the caller's to inspect. s.mu is held.
func (m *Manager) call(ctx context.Context, s *session, what string, req *agentv1.Request) (*agentv1.Response, error) {
	var resp *agentv1.Response
	err := m.guestCall(ctx, s, what, func(ctx context.Context, mach vmm.Machine) error {
		var err error
		resp, err = mach.Call(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// callOK is call that also turns a non-zero errno into an error.
func (m *Manager) callOK(ctx context.Context, s *session, what string, req *agentv1.Request) (*agentv1.Response, error) {
	resp, err := m.call(ctx, s, what, req)
	if err != nil {
		return nil, err
	}
	if err := agent.ResponseError(resp); err != nil {
		return nil, fmt.Errorf("session %s: %s: %w", s.info.ID, what, err)
	}
	return resp, nil
}

func fingerprintReq(lane string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{
		Lane: lane, TimeMode: agentv1.TimeMode_TIME_MODE_ALL, Leaves: true}}}
}

// snapshotLanes fingerprints every lane (TIME_MODE_ALL, with leaves) and keeps
// the content of regular files not kept yet, for RestoreFile. Reading a file
// may update its atime, so a lane whose files were read is walked again and
// the second walk gives the root. s.mu is held.
func (m *Manager) snapshotLanes(ctx context.Context, s *session) (map[string][]byte, snapshot, error) {
	roots := make(map[string][]byte, len(s.specs))
	snap := make(snapshot, len(s.specs))
	for _, sp := range s.specs {
		lane := sp.Name
		resp, err := m.callOK(ctx, s, "fingerprint "+lane, fingerprintReq(lane))
		if err != nil {
			return nil, nil, err
		}
		read, err := m.keepFiles(ctx, s, lane, resp.GetFingerprint().GetLeaves())
		if err != nil {
			return nil, nil, err
		}
		if read {
			if resp, err = m.callOK(ctx, s, "fingerprint "+lane, fingerprintReq(lane)); err != nil {
				return nil, nil, err
			}
		}
		fp := resp.GetFingerprint()
		roots[lane] = fp.GetRoot()
		files := make(map[string]fileRec, len(fp.GetLeaves()))
		for _, e := range fp.GetLeaves() {
			files[e.GetPath()] = fileRec{kind: e.GetKind(), mode: e.GetMode(), size: e.GetSize(),
				hash: hex.EncodeToString(e.GetContentHash()), target: e.GetSymlinkTarget()}
		}
		snap[lane] = files
	}
	return roots, snap, nil
}

// keepFiles reads and keeps the content of the regular files among a
// lane's leaves that are not kept yet and fit the limits (maxKeptFile,
// maxKeptPerSess, the session's budget); it reports whether it read any. A negative size is the
// agent's lie (agent.ErrBadResponse): it fails the session. s.mu is held.
func (m *Manager) keepFiles(ctx context.Context, s *session, lane string, leaves []*agentv1.Entry) (bool, error) {
	read := false
	for _, e := range leaves {
		if e.GetKind() != agentv1.Kind_KIND_REGULAR || e.GetReadErrno() != 0 {
			continue // nothing to keep, or content the filesystem refused to read
		}
		size := e.GetSize()
		if size < 0 {
			return false, m.machineErr(s, "fingerprint "+lane, fmt.Errorf("%q: a regular file of size %d: %w", e.GetPath(), size, agent.ErrBadResponse))
		}
		h := hex.EncodeToString(e.GetContentHash())
		if _, ok := s.blobs[h]; ok || size > maxKeptFile || s.blobsz+size > maxKeptPerSess {
			continue
		}
		if s.budget.Charge(kindKept, size) != nil {
			continue // like a file past the caps: fingerprinted, not kept
		}
		data, err := m.readAll(ctx, s, lane, e.GetPath(), size)
		if err == nil {
			if sum := blake3.Sum256(data); !bytes.Equal(sum[:], e.GetContentHash()) {
				err = fmt.Errorf("session %s: lane %s: %s changed while being kept", s.info.ID, lane, e.GetPath())
			}
		}
		if err != nil {
			s.budget.Release(kindKept, size)
			return false, err
		}
		s.budget.Release(kindKept, size-int64(len(data))) // ended short of its size: what was not kept
		s.blobs[h] = data
		s.blobsz += int64(len(data))
		read = true
	}
	return read, nil
}

// readAll reads a whole file of the given size (0..maxKeptFile) in 1 MiB
// chunks, asking for one byte past the end to see it. A read that returns
// more than it was asked for, a file longer than its size, or one that
// has no end after size/readChunk+2 reads is the agent's lie
// (agent.ErrBadResponse): it fails the session. s.mu is held.
func (m *Manager) readAll(ctx context.Context, s *session, lane, path string, size int64) ([]byte, error) {
	what := "read " + lane + "/" + path
	data := make([]byte, 0, size)
	for reads := int64(0); reads < size/readChunk+2; reads++ {
		ask := min(readChunk, size-int64(len(data))+1)
		req := &agentv1.Request{Op: &agentv1.Request_ReadFile{ReadFile: &agentv1.ReadFile{
			Lane: lane, Path: path, Offset: int64(len(data)), Length: ask}}}
		resp, err := m.callOK(ctx, s, what, req)
		if err != nil {
			return nil, err
		}
		rf := resp.GetReadFile()
		switch n := int64(len(rf.GetData())); {
		case n > ask:
			return nil, m.machineErr(s, what, fmt.Errorf("%d bytes back, more than the %d asked: %w", n, ask, agent.ErrBadResponse))
		case int64(len(data))+n > size:
			return nil, m.machineErr(s, what, fmt.Errorf("more than its size %d: %w", size, agent.ErrBadResponse))
		}
		data = append(data, rf.GetData()...)
		if rf.GetEof() || len(rf.GetData()) == 0 {
			return data, nil
		}
	}
	return nil, m.machineErr(s, what, fmt.Errorf("no end after %d bytes (size %d): %w", len(data), size, agent.ErrBadResponse))
}

// gcBlobs drops kept content no live checkpoint refers to. s.mu is held.
func (s *session) gcBlobs() {
	used := make(map[string]bool)
	for _, snap := range s.files {
		for _, files := range snap {
			for _, f := range files {
				if f.kind == agentv1.Kind_KIND_REGULAR {
					used[f.hash] = true
				}
			}
		}
	}
	for h, b := range s.blobs {
		if !used[h] {
			delete(s.blobs, h)
			s.blobsz -= int64(len(b))
		}
	}
}

func (m *Manager) lstat(ctx context.Context, s *session, lane, path string) (*agentv1.StatResult, syscall.Errno, error) {
	resp, err := m.call(ctx, s, "stat "+lane+"/"+path, &agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: lane, Path: path}}})
	if err != nil {
		return nil, 0, err
	}
	return resp.GetStat(), syscall.Errno(resp.GetErrno()), nil
}

// RestoreFile puts one file of one lane back as it was at a live checkpoint,
// or removes it when it did not exist then. Regular files get their content
// and mode back, symlinks their target. The path must stay inside the lane:
// relative, without "..", and no existing parent directory may be a symlink.
//
// The content comes from what the Fork that made the checkpoint kept of the
// lane (read through the guest then, verified against the fingerprint), so
// the rest of the running state is left as it is.
func (m *Manager) RestoreFile(ctx context.Context, sessionID, ref, lane, path string) (removed bool, size int64, err error) {
	if ref == "" {
		return false, 0, errkind.Invalid("checkpoint", "required")
	}
	if err := CheckPath("path", path); err != nil {
		return false, 0, err
	}
	if path == "" {
		return false, 0, errkind.Invalid("path", "required")
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return false, 0, err
	}
	defer s.unlock()
	if err := s.checkLane("lane", lane); err != nil {
		return false, 0, err
	}
	c, err := s.resolve(ref)
	if err != nil {
		return false, 0, err
	}
	if !c.Live {
		return false, 0, fmt.Errorf("checkpoint %s not on the current path: %w", c.ID, errkind.ErrState)
	}
	// No parent component may be a symlink now (lstat semantics).
	parts := strings.Split(path, "/")
	for i := 1; i < len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		st, errno, err := m.lstat(ctx, s, lane, prefix)
		if err != nil {
			return false, 0, err
		}
		if errno == syscall.ENOENT {
			break
		}
		if errno != 0 {
			return false, 0, fmt.Errorf("session %s: stat %s/%s: %w", s.info.ID, lane, prefix, errno)
		}
		if st.GetKind() == agentv1.Kind_KIND_SYMLINK {
			return false, 0, errkind.Invalid("path", "%q is a symlink", prefix)
		}
	}
	cur, curErrno, err := m.lstat(ctx, s, lane, path)
	if err != nil {
		return false, 0, err
	}
	exists := curErrno == 0
	if exists && cur.GetKind() == agentv1.Kind_KIND_DIRECTORY {
		return false, 0, errkind.Invalid("path", "%q is a directory now; only files and symlinks are restored", path)
	}
	rec, had := s.files[c.ID][lane][path]
	unlink := func() error {
		if !exists {
			return nil
		}
		_, err := m.callOK(ctx, s, "unlink "+lane+"/"+path, &agentv1.Request{Op: &agentv1.Request_Unlink{Unlink: &agentv1.Unlink{Lane: lane, Path: path}}})
		return err
	}
	var detail string
	switch {
	case !had:
		if err := unlink(); err != nil {
			return false, 0, err
		}
		removed = true
		detail = fmt.Sprintf("%s/%s removed (absent at %s)", lane, path, c.ID)
	case rec.kind == agentv1.Kind_KIND_SYMLINK:
		if err := unlink(); err != nil {
			return false, 0, err
		}
		if _, err := m.callOK(ctx, s, "symlink "+lane+"/"+path, &agentv1.Request{Op: &agentv1.Request_Symlink{Symlink: &agentv1.Symlink{Lane: lane, Target: rec.target, Path: path}}}); err != nil {
			return false, 0, err
		}
		size = int64(len(rec.target))
		detail = fmt.Sprintf("%s/%s restored (from %s)", lane, path, c.ID)
	case rec.kind == agentv1.Kind_KIND_REGULAR:
		data, ok := s.blobs[rec.hash]
		if !ok {
			return false, 0, notKept(lane+"/"+path, c.ID)
		}
		if exists && cur.GetKind() != agentv1.Kind_KIND_REGULAR {
			if err := unlink(); err != nil {
				return false, 0, err
			}
		}
		if err := m.writeAll(ctx, s, lane, path, data); err != nil {
			return false, 0, err
		}
		if _, err := m.callOK(ctx, s, "chmod "+lane+"/"+path, &agentv1.Request{Op: &agentv1.Request_Chmod{Chmod: &agentv1.Chmod{Lane: lane, Path: path, Mode: rec.mode}}}); err != nil {
			return false, 0, err
		}
		size = int64(len(data))
		detail = fmt.Sprintf("%s/%s restored (from %s)", lane, path, c.ID)
	default:
		return false, 0, errkind.Invalid("path", "%q was a %s at %s; only files and symlinks are restored", path, strings.ToLower(strings.TrimPrefix(rec.kind.String(), "KIND_")), c.ID)
	}
	m.event(ctx, Event{Session: s.info.ID, Kind: "restored_file", Detail: detail, Checkpoint: c.ID})
	return removed, size, nil
}

// writeAll replaces a file's content, in chunks that fit the agent's frames.
func (m *Manager) writeAll(ctx context.Context, s *session, lane, path string, data []byte) error {
	off := 0
	for first := true; first || off < len(data); first = false {
		n := min(len(data)-off, readChunk)
		flags := uint32(agent.OpenWronly)
		if first {
			flags |= agent.OpenCreat | agent.OpenTrunc
		}
		req := &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{
			Lane: lane, Path: path, Flags: flags, Offset: int64(off), Data: data[off : off+n]}}}
		if _, err := m.callOK(ctx, s, "write "+lane+"/"+path, req); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// notKept is RestoreFile's error for a file whose content Fork did not keep.
func notKept(path, cp string) error {
	return fmt.Errorf("content of %s at %s was not kept (over %d MiB, or past the session's %d MiB of kept content or its budget, %s): %w",
		path, cp, maxRestoreBytes>>20, maxKeptPerSess>>20, SessionBudgetKey, errkind.ErrState)
}
