package fork

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/zeebo/blake3"
)

// Snapshot file format, version 1 (little-endian):
//
//	header   magic "THMSNAP\x00" | version u32 | flags u32 (0) | sections u32 | reserved u32 (0)
//	section  name length u16 | name (UTF-8) | data length u64 | data      (repeated)
//	trailer  blake3-256 of everything before it
//
// The format version is independent of the product version: bump it when the
// layout or the meaning of a section changes, and keep Decode refusing what
// it does not understand.
const (
	// Magic starts every snapshot file.
	Magic = "THMSNAP\x00"
	// FormatVersion is the version Encode writes and the only one Decode reads.
	FormatVersion uint32 = 1
	// MaxSections bounds the number of sections Decode accepts.
	MaxSections = 1024
	// MaxNameLen bounds a section name, in bytes.
	MaxNameLen = 255

	headerLen  = 24
	trailerLen = 32
)

// Decoding errors.
var (
	// ErrIncompatibleFormat: not a snapshot file, or a format version this build cannot read.
	ErrIncompatibleFormat = errors.New("fork: incompatible snapshot format")
	// ErrCorrupt: a snapshot file whose checksum or structure is wrong.
	ErrCorrupt = errors.New("fork: corrupt snapshot")
	// ErrTooLarge: the input is larger than the decoder's size cap.
	ErrTooLarge = errors.New("fork: snapshot larger than the size cap")
)

// Section is one named part of a snapshot (RAM, vCPU state, a device...).
type Section struct {
	Name string
	Data []byte
}

// Encode writes sections as a snapshot file. Names must be unique,
// non-empty, valid UTF-8 and at most MaxNameLen bytes.
func Encode(w io.Writer, sections []Section) error {
	if len(sections) > MaxSections {
		return fmt.Errorf("fork: encode: %d sections, at most %d", len(sections), MaxSections)
	}
	seen := make(map[string]bool, len(sections))
	for _, s := range sections {
		if err := checkName(s.Name); err != nil {
			return fmt.Errorf("fork: encode: %w", err)
		}
		if seen[s.Name] {
			return fmt.Errorf("fork: encode: duplicate section %q", s.Name)
		}
		seen[s.Name] = true
	}
	h := blake3.New()
	mw := io.MultiWriter(w, h)
	var hdr [headerLen]byte
	copy(hdr[:8], Magic)
	binary.LittleEndian.PutUint32(hdr[8:], FormatVersion)
	binary.LittleEndian.PutUint32(hdr[16:], uint32(len(sections)))
	if _, err := mw.Write(hdr[:]); err != nil {
		return fmt.Errorf("fork: encode: %w", err)
	}
	for _, s := range sections {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], uint16(len(s.Name)))
		var l [8]byte
		binary.LittleEndian.PutUint64(l[:], uint64(len(s.Data)))
		for _, part := range [][]byte{b[:], []byte(s.Name), l[:], s.Data} {
			if _, err := mw.Write(part); err != nil {
				return fmt.Errorf("fork: encode section %q: %w", s.Name, err)
			}
		}
	}
	var sum [32]byte
	if _, err := w.Write(h.Sum(sum[:0])); err != nil {
		return fmt.Errorf("fork: encode: %w", err)
	}
	return nil
}

func checkName(n string) error {
	switch {
	case n == "":
		return errors.New("empty section name")
	case len(n) > MaxNameLen:
		return fmt.Errorf("section name of %d bytes, at most %d", len(n), MaxNameLen)
	case !utf8.ValidString(n):
		return fmt.Errorf("section name %q is not UTF-8", n)
	}
	return nil
}

// Decode reads a whole snapshot file of at most maxSize bytes and returns its
// sections in file order; their Data alias one buffer. Errors wrap
// ErrIncompatibleFormat, ErrCorrupt or ErrTooLarge, or are read errors.
func Decode(r io.Reader, maxSize int64) ([]Section, error) {
	if maxSize < headerLen+trailerLen {
		return nil, fmt.Errorf("fork: decode: size cap %d below the minimum snapshot size %d", maxSize, headerLen+trailerLen)
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("fork: decode: read: %w", err)
	}
	if n > maxSize {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxSize)
	}
	return DecodeBytes(buf.Bytes())
}

// DecodeBytes is Decode over a buffer already in memory; the sections alias b.
func DecodeBytes(b []byte) ([]Section, error) {
	if len(b) < len(Magic) || string(b[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: bad magic (not a themis snapshot)", ErrIncompatibleFormat)
	}
	if len(b) < headerLen+trailerLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than header and checksum", ErrCorrupt, len(b))
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != FormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrIncompatibleFormat, v, FormatVersion)
	}
	body, trailer := b[:len(b)-trailerLen], b[len(b)-trailerLen:]
	sum := blake3.Sum256(body)
	if !bytes.Equal(sum[:], trailer) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	if f := binary.LittleEndian.Uint32(b[12:]); f != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrIncompatibleFormat, f)
	}
	count := binary.LittleEndian.Uint32(b[16:])
	if count > MaxSections {
		return nil, fmt.Errorf("%w: %d sections, at most %d", ErrCorrupt, count, MaxSections)
	}
	if rsv := binary.LittleEndian.Uint32(b[20:]); rsv != 0 {
		return nil, fmt.Errorf("%w: reserved header field %#x", ErrCorrupt, rsv)
	}
	rest := body[headerLen:]
	out := make([]Section, 0, count)
	seen := make(map[string]bool, count)
	for i := range count {
		if len(rest) < 2 {
			return nil, fmt.Errorf("%w: section %d: truncated name length", ErrCorrupt, i)
		}
		nl := int(binary.LittleEndian.Uint16(rest))
		rest = rest[2:]
		if nl > len(rest) {
			return nil, fmt.Errorf("%w: section %d: name of %d bytes past the end", ErrCorrupt, i, nl)
		}
		name := string(rest[:nl])
		rest = rest[nl:]
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrCorrupt, i, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: duplicate section %q", ErrCorrupt, name)
		}
		seen[name] = true
		if len(rest) < 8 {
			return nil, fmt.Errorf("%w: section %q: truncated data length", ErrCorrupt, name)
		}
		dl := binary.LittleEndian.Uint64(rest)
		rest = rest[8:]
		if dl > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: section %q: %d data bytes, %d left", ErrCorrupt, name, dl, len(rest))
		}
		out = append(out, Section{Name: name, Data: rest[:dl:dl]})
		rest = rest[dl:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after the last section", ErrCorrupt, len(rest))
	}
	return out, nil
}

// Find returns the data of the section called name.
func Find(sections []Section, name string) ([]byte, bool) {
	for _, s := range sections {
		if s.Name == name {
			return s.Data, true
		}
	}
	return nil, false
}
