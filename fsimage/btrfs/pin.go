package btrfs

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
)

// Pins are the values Pin writes over what mkfs.btrfs drew: UUIDs from
// the random source, times from the clock.
type Pins struct {
	DevUUID       [16]byte // dev_item.uuid and every stripe's dev_uuid
	ChunkTreeUUID [16]byte // every tree block header's chunk_tree_uuid
	SubvolUUID    [16]byte // the default subvolume's root item uuid and its UUID tree key
	Time          int64    // Unix seconds of every inode and root item time that is set
}

// ReadWriterAt is an image Pin can rewrite.
type ReadWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// Pin rewrites a freshly made single-device image so that it no longer
// depends on the random source or the clock: the device, chunk tree and
// default subvolume UUIDs become p's (every copy: superblocks, stripes,
// tree block headers, the UUID tree key) and every non-zero inode and root
// item time becomes p.Time, then every checksum those changes touch is
// computed again. Tree blocks are found by scanning the image up to the
// end of its last chunk (data chunks excepted) for blocks that carry the
// filesystem's fsid and a valid crc32c, so stale blocks that mkfs left
// behind are pinned too. It refuses an image whose checksums are not
// crc32c.
func Pin(f ReadWriterAt, size int64, p Pins) error {
	fs, err := Open(f, size)
	if err != nil {
		return err
	}
	if fs.sb.CsumType != CsumCRC32C {
		return unsupported("pin: checksum type %d (crc32c only)", fs.sb.CsumType)
	}
	subs, err := fs.uuidSubstitutions(p)
	if err != nil {
		return err
	}
	if err := pinSuperblocks(f, size, subs); err != nil {
		return err
	}
	if err := fs.pinTreeBlocks(f, size, subs, p.Time); err != nil {
		return err
	}
	// The result must open with the new checksums and keys.
	if _, err := Open(f, size); err != nil {
		return fmt.Errorf("btrfs: pin: the pinned image does not open: %w", err)
	}
	return nil
}

// uuidSub is one byte string Pin replaces wherever it occurs, and its
// replacement of the same length.
type uuidSub struct{ old, new []byte }

// uuidSubs are the replacements Pin makes in every block it rewrites.
type uuidSubs []uuidSub

// uuidSubstitutions lists the replacements that pin fs's device, chunk tree
// and default subvolume UUIDs to p's: the UUIDs themselves and the UUID
// tree's keys for the subvolume.
func (fs *FS) uuidSubstitutions(p Pins) (uuidSubs, error) {
	chunkRoot, _, err := fs.node(fs.sb.ChunkRoot, fs.sb.ChunkLevel)
	if err != nil {
		return nil, err
	}
	ri, err := fs.rootItem(FSTreeID)
	if err != nil {
		return nil, err
	}
	subs := uuidSubs{
		{fs.sb.DevUUID[:], p.DevUUID[:]},
		{bytes.Clone(chunkRoot[64:80]), p.ChunkTreeUUID[:]},
	}
	if ri.UUID != ([16]byte{}) {
		subs = append(subs, uuidSub{ri.UUID[:], p.SubvolUUID[:]})
		// The UUID tree's key: objectid and offset are the UUID's halves
		// (little endian), around the key type.
		for _, t := range []byte{TypeUUIDSubvol, TypeUUIDRecvSub} {
			old := append(append(bytes.Clone(ri.UUID[:8]), t), ri.UUID[8:]...)
			subs = append(subs, uuidSub{old, append(append(bytes.Clone(p.SubvolUUID[:8]), t), p.SubvolUUID[8:]...)})
		}
	}
	return subs, nil
}

// replace makes every substitution in b, in place, at every
// non-overlapping occurrence.
func (subs uuidSubs) replace(b []byte) {
	for _, s := range subs {
		for i := 0; ; {
			j := bytes.Index(b[i:], s.old)
			if j < 0 {
				break
			}
			copy(b[i+j:], s.new)
			i += j + len(s.old)
		}
	}
}

// pinSuperblocks makes the substitutions in every superblock copy the
// image of size bytes holds, and computes each copy's checksum again.
func pinSuperblocks(f ReadWriterAt, size int64, subs uuidSubs) error {
	for _, off := range SuperblockCopies {
		if off+SuperblockSize > size {
			continue
		}
		b := make([]byte, SuperblockSize)
		if err := readFull(f, b, off); err != nil {
			return err
		}
		if le.Uint64(b[0x40:]) != Magic {
			continue
		}
		subs.replace(b)
		le.PutUint32(b, crc32.Checksum(b[32:], castagnoli))
		if _, err := f.WriteAt(b, off); err != nil {
			return fmt.Errorf("btrfs: pin: write superblock at %d: %w", off, err)
		}
	}
	return nil
}

// metadataSpan returns where Pin's tree block scan ends (the end of the
// last chunk stripe, capped at size) and the data-only stripes it skips,
// as [start, end) byte ranges.
func (fs *FS) metadataSpan(size int64) (end int64, skip [][2]int64) {
	for _, c := range fs.chunks {
		for _, s := range c.Stripes {
			e := int64(min(s.Offset+c.Length, uint64(size)))
			end = max(end, e)
			if c.Type&(BlockGroupSystem|BlockGroupMetadata) == 0 {
				skip = append(skip, [2]int64{int64(s.Offset), e})
			}
		}
	}
	return end, skip
}

// pinTreeBlocks pins tree blocks, live or stale: every nodesize-aligned
// block from the first MiB to the end of the last chunk stripe, data-only
// stripes excepted, whose header names this filesystem and whose crc32c is
// valid. mkfs.btrfs builds the first trees in temporary chunks at 1 MiB
// and moves them, leaving stale blocks outside every chunk. Each gets the
// substitutions, a leaf its times set to t, and its checksum again.
func (fs *FS) pinTreeBlocks(f ReadWriterAt, size int64, subs uuidSubs, t int64) error {
	ns := int64(fs.sb.NodeSize)
	end, skip := fs.metadataSpan(size)
	b := make([]byte, ns)
next:
	for off := int64(1 << 20); off+ns <= end; off += ns {
		for _, s := range skip {
			if off+ns > s[0] && off < s[1] {
				continue next
			}
		}
		if err := readFull(f, b, off); err != nil {
			return err
		}
		if !bytes.Equal(b[32:48], fs.sb.FSID[:]) || crc32.Checksum(b[32:], castagnoli) != le.Uint32(b) {
			continue
		}
		subs.replace(b)
		if b[100] == 0 {
			if err := pinTimes(b, t); err != nil {
				return fmt.Errorf("btrfs: pin: tree block at %d: %w", off, err)
			}
		}
		le.PutUint32(b, crc32.Checksum(b[32:], castagnoli))
		if _, err := f.WriteAt(b, off); err != nil {
			return fmt.Errorf("btrfs: pin: write tree block at %d: %w", off, err)
		}
	}
	return nil
}

// Offsets of the times (struct btrfs_timespec: le64 seconds, le32 nsec).
var (
	inodeTimes = []int{112, 124, 136, 148} // atime, ctime, mtime, otime
	rootTimes  = []int{327, 339, 351, 363} // ctime, otime, stime, rtime
)

// pinTimes sets every non-zero time of the leaf's inode and root items to
// t, and checks the leaf's keys stay sorted (a pinned UUID key could move).
func pinTimes(leaf []byte, t int64) error {
	n, err := nritems(leaf, itemSize)
	if err != nil {
		return err
	}
	set := func(b []byte, offs []int) {
		for _, o := range offs {
			if o+12 <= len(b) && (le.Uint64(b[o:]) != 0 || le.Uint32(b[o+8:]) != 0) {
				le.PutUint64(b[o:], uint64(t))
				le.PutUint32(b[o+8:], 0)
			}
		}
	}
	var prev Key
	for i := range n {
		h := leaf[headerSize+i*itemSize:]
		k := parseKey(h)
		if i > 0 && !prev.Less(k) {
			return corrupt("leaf keys out of order at item %d", i)
		}
		prev = k
		off, sz := int(le.Uint32(h[17:])), int(le.Uint32(h[21:]))
		start := headerSize + off
		if start < headerSize || start+sz > len(leaf) || start+sz < start {
			return corrupt("item %d outside the leaf", i)
		}
		d := leaf[start : start+sz]
		switch k.Type {
		case TypeInodeItem:
			set(d, inodeTimes)
		case TypeRootItem:
			if len(d) >= inodeSize {
				set(d[:inodeSize], inodeTimes)
			}
			set(d, rootTimes)
		}
	}
	return nil
}
