package fsimage

import (
	"encoding/binary"
	"fmt"
	iofs "io/fs"
	"strings"
)

// MaxLookupDepth bounds the components of a path given to Lookup.
const MaxLookupDepth = 256

// Directory entry file types (Dirent.FileType, with the filetype feature).
const (
	FTUnknown  = 0
	FTRegular  = 1
	FTDir      = 2
	FTChar     = 3
	FTBlock    = 4
	FTFIFO     = 5
	FTSocket   = 6
	FTSymlink  = 7
	ftCsumTail = 0xDE // the fake entry holding a leaf block's checksum
)

// Dirent is one directory entry (struct ext4_dir_entry_2) and where it
// lives.
type Dirent struct {
	Inode    uint32 // inode number
	RecLen   uint32 // rec_len decoded: bytes to the next entry
	NameLen  uint8  // name_len
	FileType uint8  // file_type (FT*), 0 without the filetype feature
	Name     string
	Block    uint64 // physical block holding the entry
	Offset   int    // byte offset of the entry within Block
}

// dirRecLen is the smallest rec_len holding a name of n bytes.
func dirRecLen(n int) int { return (8 + n + 3) &^ 3 }

// parseDirBlock decodes the entries of one linear directory block of
// len(b) bytes, the block size. Entries with inode 0 (unused space, the
// checksum tail, htree node headers) are validated but not returned.
// blk is recorded in each Dirent; filetype says whether the second name
// length byte is a file type.
func parseDirBlock(b []byte, blk uint64, filetype bool) ([]Dirent, error) {
	le := binary.LittleEndian
	var out []Dirent
	for off := 0; off < len(b); {
		if len(b)-off < 8 {
			return nil, fmt.Errorf("%w: directory block %d: entry at %d runs off the block", ErrCorrupt, blk, off)
		}
		e := b[off:]
		ino := le.Uint32(e)
		rl := int(le.Uint16(e[4:]))
		if (rl == 0 || rl == 65535) && len(b) == 65536 {
			rl = 65536 // ext4_rec_len_from_disk
		}
		nl := int(e[6])
		if rl < 8 || rl%4 != 0 || rl > len(b)-off || rl < dirRecLen(nl) {
			return nil, fmt.Errorf("%w: directory block %d: entry at %d: rec_len %d, name_len %d", ErrCorrupt, blk, off, rl, nl)
		}
		if ino != 0 {
			if nl == 0 {
				return nil, fmt.Errorf("%w: directory block %d: entry at %d has an empty name", ErrCorrupt, blk, off)
			}
			d := Dirent{Inode: ino, RecLen: uint32(rl), NameLen: uint8(nl), Name: string(e[8 : 8+nl]), Block: blk, Offset: off}
			if filetype {
				d.FileType = e[7]
			}
			out = append(out, d)
		}
		off += rl
	}
	return out, nil
}

// dirBlock is one block of a directory.
type dirBlock struct {
	logical, physical uint64
}

// dirBlocks lists the mapped blocks of directory in below its i_size.
func (fs *FS) dirBlocks(in *Inode) ([]dirBlock, error) {
	if !in.IsDir() {
		return nil, fmt.Errorf("fsimage: inode %d: not a directory (mode %#o)", in.Ino, in.Mode)
	}
	m, err := fs.mapInode(in)
	if err != nil {
		return nil, err
	}
	n := (in.Size + uint64(fs.bs) - 1) / uint64(fs.bs)
	var out []dirBlock
	for _, e := range m.extents {
		if e.Uninit {
			continue
		}
		for i := uint64(0); i < uint64(e.Len) && e.Logical+i < n; i++ {
			out = append(out, dirBlock{e.Logical + i, e.Physical + i})
		}
	}
	return out, nil
}

// ReadDir returns the entries of directory ino in on-disk order, block by
// block. Hashed (htree) directories are read linearly, as their index
// blocks hold no live entries.
func (fs *FS) ReadDir(ino uint32) ([]Dirent, error) {
	in, err := fs.Inode(ino)
	if err != nil {
		return nil, err
	}
	return fs.readDir(in)
}

func (fs *FS) readDir(in *Inode) ([]Dirent, error) {
	blocks, err := fs.dirBlocks(in)
	if err != nil {
		return nil, err
	}
	filetype := fs.sb.FeatureIncompat&IncompatFiletype != 0
	buf := make([]byte, fs.bs)
	var out []Dirent
	for _, db := range blocks {
		if err := fs.readBlockInto(buf, db.physical); err != nil {
			return nil, err
		}
		ents, err := parseDirBlock(buf, db.physical, filetype)
		if err != nil {
			return nil, fmt.Errorf("fsimage: directory %d logical block %d: %w", in.Ino, db.logical, err)
		}
		out = append(out, ents...)
	}
	return out, nil
}

// Lookup resolves path to an inode number, walking directory entries from
// the root (inode 2). Empty components are skipped; "." and ".." are
// looked up as the entries they are on disk; symbolic links are not
// followed (a link as the last component resolves to the link itself). A
// missing name fails with an error wrapping io/fs.ErrNotExist.
func (fs *FS) Lookup(path string) (uint32, error) {
	ino := uint32(RootIno)
	parts := strings.Split(path, "/")
	if len(parts) > MaxLookupDepth {
		return 0, fmt.Errorf("fsimage: lookup %q: %w: over %d components", path, ErrTooLarge, MaxLookupDepth)
	}
	for _, name := range parts {
		if name == "" {
			continue
		}
		in, err := fs.Inode(ino)
		if err != nil {
			return 0, fmt.Errorf("fsimage: lookup %q: %w", path, err)
		}
		if !in.IsDir() {
			return 0, fmt.Errorf("fsimage: lookup %q: inode %d before %q is not a directory", path, ino, name)
		}
		ents, err := fs.readDir(in)
		if err != nil {
			return 0, fmt.Errorf("fsimage: lookup %q: %w", path, err)
		}
		found := false
		for _, d := range ents {
			if d.Name == name {
				ino, found = d.Inode, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("fsimage: lookup %q: %q: %w", path, name, iofs.ErrNotExist)
		}
	}
	return ino, nil
}
