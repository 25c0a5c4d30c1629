package oracle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/zeebo/blake3"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// TimeMode selects which timestamps a fingerprint includes.
type TimeMode = agentv1.TimeMode

// Domain-separation prefixes; the trailing number is the encoding version.
const (
	leafDomain = "themis.oracle.leaf.v1\x00"
	foldDomain = "themis.oracle.fold.v1\x00"
)

// normMode maps a TimeMode to the one it means: UNSPECIFIED and unknown
// values mean NONE.
func normMode(mode TimeMode) TimeMode {
	switch mode {
	case agentv1.TimeMode_TIME_MODE_MTIME, agentv1.TimeMode_TIME_MODE_ALL:
		return mode
	default:
		return agentv1.TimeMode_TIME_MODE_NONE
	}
}

// encoder appends fixed-width big-endian fields and length-prefixed strings.
type encoder struct{ b []byte }

func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bytes(p []byte) {
	e.u64(uint64(len(p)))
	e.b = append(e.b, p...)
}

func (e *encoder) time(t *agentv1.Timespec) {
	e.u64(uint64(t.GetSec()))
	e.u64(uint64(t.GetNsec()))
}

// leafBytes is the canonical encoding of one entry under mode.
func leafBytes(e *agentv1.Entry, mode TimeMode) []byte {
	mode = normMode(mode)
	enc := encoder{b: make([]byte, 0, 128+len(e.GetPath())+len(e.GetSymlinkTarget()))}
	enc.b = append(enc.b, leafDomain...)
	enc.u32(uint32(mode))
	enc.str(e.GetPath())
	enc.u32(uint32(e.GetKind()))
	enc.u32(e.GetMode())
	enc.u32(e.GetUid())
	enc.u32(e.GetGid())
	enc.u64(e.GetNlink())
	enc.u64(uint64(e.GetSize()))
	enc.bytes(e.GetContentHash())
	enc.str(e.GetSymlinkTarget())
	switch mode {
	case agentv1.TimeMode_TIME_MODE_MTIME:
		enc.time(e.GetMtime())
	case agentv1.TimeMode_TIME_MODE_ALL:
		enc.time(e.GetAtime())
		enc.time(e.GetMtime())
		enc.time(e.GetCtime())
	}
	if n := e.GetReadErrno(); n != 0 {
		// After every other field, and only when set: the leaves of
		// readable entries hash as they did before entries carried errnos.
		enc.str("read_errno")
		enc.u32(n)
	}
	return enc.b
}

// ErrnoText is an entry's read_errno in words: "none" for 0, else the
// number and its meaning ("errno 74 (bad message)").
func ErrnoText(n uint32) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("errno %d (%v)", n, syscall.Errno(n))
}

// LeafHash hashes one entry canonically: a versioned, length-prefixed binary
// encoding of path, kind, mode, uid, gid, nlink, size, content_hash,
// symlink_target and the timestamps the mode selects (NONE and UNSPECIFIED:
// none; MTIME: mtime; ALL: atime, mtime, ctime; each as seconds and
// nanoseconds), then read_errno when it is not 0. A nil entry hashes like
// an empty one.
func LeafHash(e *agentv1.Entry, mode TimeMode) [32]byte {
	return blake3.Sum256(leafBytes(e, mode))
}

// leaf is one entry reduced to what Fold needs.
type leaf struct {
	path string
	hash [32]byte
}

// leaves hashes entries under mode and sorts them by path in byte order, then
// by hash, so that the result does not depend on the input order even when
// paths repeat. The input slice is not touched.
func leaves(entries []*agentv1.Entry, mode TimeMode) []leaf {
	ls := make([]leaf, len(entries))
	for i, e := range entries {
		ls[i] = leaf{path: e.GetPath(), hash: LeafHash(e, mode)}
	}
	slices.SortFunc(ls, func(a, b leaf) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return bytes.Compare(a.hash[:], b.hash[:])
	})
	return ls
}

// Fold returns the root of entries under mode: blake3-256 over a versioned
// header (domain, mode, entry count) followed by, for each entry in path byte
// order, the path length (8 bytes big-endian), the path and its LeafHash.
// The input slice is not reordered.
func Fold(entries []*agentv1.Entry, mode TimeMode) [32]byte {
	h := blake3.New()
	var enc encoder
	enc.b = append(enc.b, foldDomain...)
	enc.u32(uint32(normMode(mode)))
	enc.u64(uint64(len(entries)))
	for _, l := range leaves(entries, mode) {
		enc.str(l.path)
		enc.b = append(enc.b, l.hash[:]...)
		if len(enc.b) >= 32<<10 {
			WriteAll(h, enc.b)
			enc.b = enc.b[:0]
		}
	}
	WriteAll(h, enc.b)
	var root [32]byte
	h.Sum(root[:0])
	return root
}

// WriteAll feeds p to h; a blake3 hasher never fails to write.
func WriteAll(h *blake3.Hasher, p []byte) {
	if _, err := h.Write(p); err != nil {
		panic("oracle: blake3 write: " + err.Error())
	}
}

// FirstDiff returns the first path, in path byte order, where a and b differ
// under mode: an entry present on one side only, or entries with different
// leaf hashes. ok is false when the two sets are equal under mode (and then
// fold to the same root).
func FirstDiff(a, b []*agentv1.Entry, mode TimeMode) (path string, ok bool) {
	la, lb := leaves(a, mode), leaves(b, mode)
	i, j := 0, 0
	for i < len(la) && j < len(lb) {
		switch c := strings.Compare(la[i].path, lb[j].path); {
		case c < 0:
			return la[i].path, true
		case c > 0:
			return lb[j].path, true
		}
		if la[i].hash != lb[j].hash {
			return la[i].path, true
		}
		i++
		j++
	}
	switch {
	case i < len(la):
		return la[i].path, true
	case j < len(lb):
		return lb[j].path, true
	}
	return "", false
}

// Root is Fold as a slice, the form a lane state's root is compared and
// stored in.
func Root(entries []*agentv1.Entry, mode TimeMode) []byte {
	r := Fold(entries, mode)
	return r[:]
}

// Find returns the entry at path, or nil.
func Find(entries []*agentv1.Entry, path string) *agentv1.Entry {
	for _, e := range entries {
		if e.GetPath() == path {
			return e
		}
	}
	return nil
}
