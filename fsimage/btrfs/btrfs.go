package btrfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/themisfs/themis/fsimage"
)

var le = binary.LittleEndian

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// On-disk constants (fs/btrfs/ctree.h, uapi/linux/btrfs_tree.h).
const (
	// SuperblockOffset is the primary superblock's byte offset.
	SuperblockOffset = 64 << 10
	// SuperblockSize is the bytes of a superblock copy.
	SuperblockSize = 4096
	// Magic is the superblock's magic, "_BHRfS_M" read as little endian.
	Magic = 0x4D5F53665248425F

	headerSize   = 101 // struct btrfs_header
	itemSize     = 25  // struct btrfs_item
	keyPtrSize   = 33  // struct btrfs_key_ptr
	diskKeySize  = 17  // struct btrfs_disk_key
	chunkSize    = 48  // struct btrfs_chunk without its stripes
	stripeSize   = 32  // struct btrfs_stripe
	inodeSize    = 160 // struct btrfs_inode_item
	rootItemSize = 439 // struct btrfs_root_item (v2)
	dirItemSize  = 30  // struct btrfs_dir_item without its name

	sysChunkArrayOffset = 0x32B
	sysChunkArrayMax    = 2048
	devItemOffset       = 0xC9
	devItemUUIDOffset   = devItemOffset + 66

	// maxLevel bounds tree descents (BTRFS_MAX_LEVEL).
	maxLevel = 8
	// maxItems bounds one walk's items.
	maxItems = 1 << 20
	// maxNodeSize is the largest nodesize mkfs.btrfs makes.
	maxNodeSize = 64 << 10
)

// Key types.
const (
	TypeInodeItem   = 1
	TypeInodeRef    = 12
	TypeDirItem     = 84
	TypeDirIndex    = 96
	TypeExtentData  = 108
	TypeRootItem    = 132
	TypeDevItem     = 216
	TypeChunkItem   = 228
	TypeUUIDSubvol  = 251
	TypeUUIDRecvSub = 252
)

// Tree object ids.
const (
	RootTreeID       = 1
	ChunkTreeID      = 3
	FSTreeID         = 5
	firstChunkTreeID = 256
)

// Block group (chunk) type bits.
const (
	BlockGroupData     = 1 << 0
	BlockGroupSystem   = 1 << 1
	BlockGroupMetadata = 1 << 2
	BlockGroupDUP      = 1 << 5
	// profileMask is every profile bit; single is none of them.
	profileMask = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | 1<<9 | 1<<10
)

// CsumCRC32C is the superblock csum_type of crc32c, the only checksum
// type this package verifies.
const CsumCRC32C = 0

// Key is a B-tree key: items sort by ObjectID, then Type, then Offset.
type Key struct {
	ObjectID uint64
	Type     uint8
	Offset   uint64
}

// Less reports whether k sorts before o.
func (k Key) Less(o Key) bool {
	if k.ObjectID != o.ObjectID {
		return k.ObjectID < o.ObjectID
	}
	if k.Type != o.Type {
		return k.Type < o.Type
	}
	return k.Offset < o.Offset
}

func parseKey(b []byte) Key {
	return Key{ObjectID: le.Uint64(b), Type: b[8], Offset: le.Uint64(b[9:])}
}

// Superblock is the fields of the primary superblock this package uses.
type Superblock struct {
	FSID          [16]byte
	Generation    uint64
	Root          uint64 // logical address of the root tree's root node
	ChunkRoot     uint64 // logical address of the chunk tree's root node
	TotalBytes    uint64
	NumDevices    uint64
	SectorSize    uint32
	NodeSize      uint32
	CsumType      uint16
	RootLevel     uint8
	ChunkLevel    uint8
	IncompatFlags uint64
	DevID         uint64   // this device's id (dev_item.devid)
	DevUUID       [16]byte // this device's UUID (dev_item.uuid)
	Label         string
}

// Stripe is one copy of a chunk on a device.
type Stripe struct {
	DevID  uint64
	Offset uint64 // physical byte offset
}

// Chunk maps Length bytes of logical address space from Logical.
type Chunk struct {
	Logical, Length uint64
	Type            uint64 // BlockGroup* bits and the profile
	Stripes         []Stripe
}

// Kind names what the chunk holds: "system", "metadata", "data" or
// "data+metadata" (mixed block groups).
func (c Chunk) Kind() string {
	switch {
	case c.Type&BlockGroupSystem != 0:
		return KindSystem
	case c.Type&BlockGroupData != 0 && c.Type&BlockGroupMetadata != 0:
		return KindMixed
	case c.Type&BlockGroupMetadata != 0:
		return KindMetadata
	case c.Type&BlockGroupData != 0:
		return KindData
	}
	return KindUnallocated
}

// FS is an opened btrfs image.
type FS struct {
	r       io.ReaderAt
	size    int64
	sb      Superblock
	chunks  []Chunk // sorted by Logical, not overlapping
	verify  bool    // verify tree block checksums (crc32c only)
	fsRoot  uint64  // FS_TREE's root node
	fsLevel uint8
	rootDir uint64 // FS_TREE's root directory inode
}

func corrupt(format string, a ...any) error {
	return fmt.Errorf("btrfs: %w: %s", fsimage.ErrCorrupt, fmt.Sprintf(format, a...))
}

func unsupported(format string, a ...any) error {
	return fmt.Errorf("btrfs: %w: %s", fsimage.ErrUnsupported, fmt.Sprintf(format, a...))
}

// Open parses the superblock at 64 KiB, the chunk map and the default
// subvolume's root of the image r of size bytes, verifying crc32c
// checksums.
func Open(r io.ReaderAt, size int64) (*FS, error) {
	return open(r, size, true)
}

func open(r io.ReaderAt, size int64, verify bool) (*FS, error) {
	if size < SuperblockOffset+SuperblockSize {
		return nil, corrupt("image of %d bytes has no superblock", size)
	}
	raw := make([]byte, SuperblockSize)
	if err := readFull(r, raw, SuperblockOffset); err != nil {
		return nil, err
	}
	sb, err := parseSuperblock(raw, verify)
	if err != nil {
		return nil, err
	}
	fs := &FS{r: r, size: size, sb: sb, verify: verify && sb.CsumType == CsumCRC32C}
	sys, err := parseSysChunks(raw)
	if err != nil {
		return nil, err
	}
	if err := fs.setChunks(sys); err != nil {
		return nil, err
	}
	// The chunk tree holds every chunk, the system ones again.
	var chunks []Chunk
	err = fs.walk(sb.ChunkRoot, sb.ChunkLevel, Key{firstChunkTreeID, TypeChunkItem, 0}, Key{firstChunkTreeID, TypeChunkItem, ^uint64(0)},
		func(it Item) error {
			c, err := parseChunk(it.Key.Offset, it.Data)
			if err != nil {
				return err
			}
			chunks = append(chunks, c)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("btrfs: chunk tree: %w", err)
	}
	if err := fs.setChunks(chunks); err != nil {
		return nil, err
	}
	ri, err := fs.rootItem(FSTreeID)
	if err != nil {
		return nil, err
	}
	fs.fsRoot, fs.fsLevel, fs.rootDir = ri.Bytenr, ri.Level, ri.RootDir
	return fs, nil
}

func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corrupt("%d bytes at %d: short read (%d)", len(b), off, n)
	}
	return fmt.Errorf("btrfs: read %d bytes at %d: %w", len(b), off, err)
}

func parseSuperblock(b []byte, verify bool) (Superblock, error) {
	var sb Superblock
	if len(b) < SuperblockSize {
		return sb, corrupt("superblock of %d bytes", len(b))
	}
	if m := le.Uint64(b[0x40:]); m != Magic {
		return sb, corrupt("bad superblock magic %#x", m)
	}
	sb.CsumType = le.Uint16(b[0xC4:])
	if verify && sb.CsumType == CsumCRC32C {
		if got, want := crc32.Checksum(b[32:SuperblockSize], castagnoli), le.Uint32(b); got != want {
			return sb, corrupt("superblock checksum %#08x, computed %#08x", want, got)
		}
	}
	copy(sb.FSID[:], b[0x20:0x30])
	sb.Generation = le.Uint64(b[0x48:])
	sb.Root = le.Uint64(b[0x50:])
	sb.ChunkRoot = le.Uint64(b[0x58:])
	sb.TotalBytes = le.Uint64(b[0x70:])
	sb.NumDevices = le.Uint64(b[0x88:])
	sb.SectorSize = le.Uint32(b[0x90:])
	sb.NodeSize = le.Uint32(b[0x94:])
	sb.IncompatFlags = le.Uint64(b[0xBC:])
	sb.RootLevel = b[0xC6]
	sb.ChunkLevel = b[0xC7]
	sb.DevID = le.Uint64(b[devItemOffset:])
	copy(sb.DevUUID[:], b[devItemUUIDOffset:devItemUUIDOffset+16])
	label := b[0x12B : 0x12B+256]
	for i, c := range label {
		if c == 0 {
			label = label[:i]
			break
		}
	}
	sb.Label = string(label)
	switch {
	case sb.SectorSize < 4096 || sb.SectorSize > maxNodeSize || sb.SectorSize&(sb.SectorSize-1) != 0:
		return sb, corrupt("sectorsize %d", sb.SectorSize)
	case sb.NodeSize < sb.SectorSize || sb.NodeSize > maxNodeSize || sb.NodeSize&(sb.NodeSize-1) != 0:
		return sb, corrupt("nodesize %d (sectorsize %d)", sb.NodeSize, sb.SectorSize)
	case sb.RootLevel >= maxLevel || sb.ChunkLevel >= maxLevel:
		return sb, corrupt("tree level %d/%d", sb.RootLevel, sb.ChunkLevel)
	case sb.NumDevices != 1:
		return sb, unsupported("%d devices (single-device images only)", sb.NumDevices)
	}
	return sb, nil
}

// parseSysChunks reads the superblock's system chunk array: (key, chunk)
// pairs that map the chunk tree.
func parseSysChunks(sb []byte) ([]Chunk, error) {
	n := le.Uint32(sb[0xA0:])
	if n > sysChunkArrayMax {
		return nil, corrupt("sys_chunk_array_size %d", n)
	}
	arr := sb[sysChunkArrayOffset : sysChunkArrayOffset+int(n)]
	var out []Chunk
	for len(arr) > 0 {
		if len(arr) < diskKeySize+chunkSize {
			return nil, corrupt("sys_chunk_array: %d trailing bytes", len(arr))
		}
		k := parseKey(arr)
		if k.Type != TypeChunkItem {
			return nil, corrupt("sys_chunk_array: key type %d", k.Type)
		}
		arr = arr[diskKeySize:]
		ns := int(le.Uint16(arr[44:]))
		l := chunkSize + ns*stripeSize
		if ns == 0 || l > len(arr) {
			return nil, corrupt("sys_chunk_array: %d stripes in %d bytes", ns, len(arr))
		}
		c, err := parseChunk(k.Offset, arr[:l])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		arr = arr[l:]
	}
	if len(out) == 0 {
		return nil, corrupt("empty sys_chunk_array")
	}
	return out, nil
}

// maxStripes bounds a chunk's stripes (RAID1C4 has 4; RAID0 on many
// devices more).
const maxStripes = 256

func parseChunk(logical uint64, b []byte) (Chunk, error) {
	if len(b) < chunkSize {
		return Chunk{}, corrupt("chunk item of %d bytes", len(b))
	}
	c := Chunk{Logical: logical, Length: le.Uint64(b), Type: le.Uint64(b[24:])}
	ns := int(le.Uint16(b[44:]))
	if ns == 0 || ns > maxStripes || chunkSize+ns*stripeSize > len(b) {
		return Chunk{}, corrupt("chunk at %d: %d stripes in %d bytes", logical, ns, len(b))
	}
	if c.Length == 0 || logical+c.Length < logical {
		return Chunk{}, corrupt("chunk at %d: length %d", logical, c.Length)
	}
	for i := range ns {
		s := b[chunkSize+i*stripeSize:]
		c.Stripes = append(c.Stripes, Stripe{DevID: le.Uint64(s), Offset: le.Uint64(s[8:])})
	}
	return c, nil
}

// setChunks installs cs as the chunk map after checking they do not
// overlap.
func (fs *FS) setChunks(cs []Chunk) error {
	cs = append([]Chunk(nil), cs...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Logical < cs[j].Logical })
	for i := 1; i < len(cs); i++ {
		if cs[i-1].Logical+cs[i-1].Length > cs[i].Logical {
			return corrupt("chunks at %d and %d overlap", cs[i-1].Logical, cs[i].Logical)
		}
	}
	if len(cs) == 0 {
		return corrupt("no chunks")
	}
	fs.chunks = cs
	return nil
}

// Superblock returns the parsed primary superblock.
func (fs *FS) Superblock() Superblock { return fs.sb }

// Chunks returns the chunk map sorted by logical address; callers must
// not modify it.
func (fs *FS) Chunks() []Chunk { return fs.chunks }

// chunk returns the chunk holding logical address l.
func (fs *FS) chunk(l uint64) (Chunk, error) {
	i := sort.Search(len(fs.chunks), func(i int) bool { return fs.chunks[i].Logical+fs.chunks[i].Length > l })
	if i == len(fs.chunks) || fs.chunks[i].Logical > l {
		return Chunk{}, corrupt("logical address %d is in no chunk", l)
	}
	return fs.chunks[i], nil
}

// Physical maps a logical address to the image offsets of its copies: one
// for the single profile, two for DUP.
func (fs *FS) Physical(logical uint64) ([]int64, error) {
	c, err := fs.chunk(logical)
	if err != nil {
		return nil, err
	}
	if p := c.Type & profileMask; p != 0 && p != BlockGroupDUP {
		return nil, unsupported("chunk at %d: profile %#x (single and DUP only)", c.Logical, p)
	}
	var out []int64
	for _, s := range c.Stripes {
		if s.DevID != fs.sb.DevID {
			return nil, unsupported("chunk at %d: stripe on device %d, image is device %d", c.Logical, s.DevID, fs.sb.DevID)
		}
		p := s.Offset + (logical - c.Logical)
		if p < s.Offset || p >= uint64(fs.size) {
			return nil, corrupt("logical %d maps to %d, past the image's %d bytes", logical, p, fs.size)
		}
		out = append(out, int64(p))
	}
	return out, nil
}

// node reads and checks the tree block at logical address l, expected at
// level.
func (fs *FS) node(l uint64, level uint8) ([]byte, int64, error) {
	phys, err := fs.Physical(l)
	if err != nil {
		return nil, 0, err
	}
	ns := int64(fs.sb.NodeSize)
	if phys[0]+ns > fs.size {
		return nil, 0, corrupt("tree block %d at %d runs past the image", l, phys[0])
	}
	b := make([]byte, ns)
	if err := readFull(fs.r, b, phys[0]); err != nil {
		return nil, 0, err
	}
	if fs.verify {
		if got, want := crc32.Checksum(b[32:], castagnoli), le.Uint32(b); got != want {
			return nil, 0, corrupt("tree block %d: checksum %#08x, computed %#08x", l, want, got)
		}
	}
	if got := le.Uint64(b[48:]); got != l {
		return nil, 0, corrupt("tree block %d says it is at %d", l, got)
	}
	if b[100] != level {
		return nil, 0, corrupt("tree block %d: level %d, want %d", l, b[100], level)
	}
	return b, phys[0], nil
}

// Item is a leaf item found by a walk.
type Item struct {
	Key  Key
	Data []byte // the item's bytes (a slice of the leaf)
	// Phys is the image offset of Data[0] in the leaf's first copy, Leaf
	// that of the leaf itself (its header).
	Phys, Leaf int64
}

// nritems checks a node's item count against what fits.
func nritems(b []byte, each int) (int, error) {
	n := int(le.Uint32(b[96:]))
	if n > (len(b)-headerSize)/each {
		return 0, corrupt("tree block %d: %d items do not fit", le.Uint64(b[48:]), n)
	}
	return n, nil
}

// walk calls fn for every item with lo <= key <= hi in the tree rooted at
// root (at level), in key order.
func (fs *FS) walk(root uint64, level uint8, lo, hi Key, fn func(Item) error) error {
	count := 0
	var visit func(l uint64, level uint8) error
	visit = func(l uint64, level uint8) error {
		b, phys, err := fs.node(l, level)
		if err != nil {
			return err
		}
		if level == 0 {
			n, err := nritems(b, itemSize)
			if err != nil {
				return err
			}
			for i := range n {
				h := b[headerSize+i*itemSize:]
				k := parseKey(h)
				if k.Less(lo) {
					continue
				}
				if hi.Less(k) {
					return nil
				}
				off, sz := int(le.Uint32(h[17:])), int(le.Uint32(h[21:]))
				start := headerSize + off
				if off < 0 || sz < 0 || start < headerSize+n*itemSize || start+sz > len(b) || start+sz < start {
					return corrupt("tree block %d: item %d at %d+%d outside the leaf", l, i, off, sz)
				}
				if count++; count > maxItems {
					return fmt.Errorf("btrfs: %w: walk over %d items", fsimage.ErrTooLarge, maxItems)
				}
				if err := fn(Item{Key: k, Data: b[start : start+sz : start+sz], Phys: phys + int64(start), Leaf: phys}); err != nil {
					return err
				}
			}
			return nil
		}
		n, err := nritems(b, keyPtrSize)
		if err != nil {
			return err
		}
		for i := range n {
			p := b[headerSize+i*keyPtrSize:]
			k := parseKey(p)
			if hi.Less(k) {
				return nil
			}
			if i+1 < n && !lo.Less(parseKey(b[headerSize+(i+1)*keyPtrSize:])) {
				continue // the next child starts at or before lo
			}
			if err := visit(le.Uint64(p[17:]), level-1); err != nil {
				return err
			}
		}
		return nil
	}
	if level >= maxLevel {
		return corrupt("tree level %d", level)
	}
	return visit(root, level)
}

// RootItem is the fields of a ROOT_ITEM this package uses.
type RootItem struct {
	Bytenr  uint64 // the tree's root node
	Level   uint8
	RootDir uint64 // root directory inode (subvolumes)
	UUID    [16]byte
}

// rootItem finds tree id's ROOT_ITEM in the root tree.
func (fs *FS) rootItem(id uint64) (RootItem, error) {
	var ri RootItem
	found := false
	err := fs.walk(fs.sb.Root, fs.sb.RootLevel, Key{id, TypeRootItem, 0}, Key{id, TypeRootItem, ^uint64(0)}, func(it Item) error {
		if found {
			return nil
		}
		r, err := parseRootItem(it.Data)
		if err != nil {
			return err
		}
		ri, found = r, true
		return nil
	})
	if err != nil {
		return ri, fmt.Errorf("btrfs: root tree: %w", err)
	}
	if !found {
		return ri, corrupt("no root item for tree %d", id)
	}
	return ri, nil
}

func parseRootItem(b []byte) (RootItem, error) {
	// Items before v2 (no uuid) end after drop_level and level: 239 bytes.
	if len(b) < 239 {
		return RootItem{}, corrupt("root item of %d bytes", len(b))
	}
	ri := RootItem{RootDir: le.Uint64(b[168:]), Bytenr: le.Uint64(b[176:]), Level: b[238]}
	if ri.Level >= maxLevel {
		return RootItem{}, corrupt("root item level %d", ri.Level)
	}
	if len(b) >= 247+16 {
		copy(ri.UUID[:], b[247:263])
	}
	return ri, nil
}
