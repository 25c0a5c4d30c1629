package inguest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	"github.com/themisfs/themis/oracle"
)

// Regular files larger than sparseFrom are hashed by sparseDigest, not by
// reading every byte: a far write or truncate (explore's far ops) makes a
// file of terabytes that is nearly all hole, and reading it whole would
// take the guest hours. Files up to sparseFrom keep the plain blake3 of
// their bytes (the golden roots and the host's kept copies, at most
// session's maxKeptFile of 64 MiB, rely on it).
const sparseFrom = 64 << 20

// sparseChunk is the unit of sparseDigest: a chunk whose bytes are all
// zero is left out whether it is a hole or written zeros.
const sparseChunk = 64 << 10

// sparseReadMax bounds the bytes sparseDigest reads of one file. A
// filesystem without its own SEEK_DATA (udf, vfat, exfat, minix, nilfs2)
// reports the whole file as data; past the bound the file's digest is
// sparseUnread's, which says its size and nothing of its bytes. A far
// write leaves at most 64 KiB + 1 of data where SEEK_DATA works; a udf
// hole reads at about 35 MB/s under QEMU/TCG (100 MB in 2.9 s), so a
// bound of 256 MiB would cost some 7 s a walk, and 8 MiB costs 0.1 s.
const sparseReadMax = 8 << 20

// sparseDomain starts every sparse digest, so that none equals the plain
// blake3 of some file's bytes.
const sparseDomain = "themis sparse content v1\x00"

// seekFunc is lseek(2); tests put a filesystem's wrong answers in its
// place.
type seekFunc func(fd int, off int64, whence int) (int64, error)

// sparseDigest hashes the regular file fd of the given size (> sparseFrom)
// as the sequence of its nonzero sparseChunk-aligned chunks, each with its
// offset and length, then the size. Only chunks that SEEK_DATA reports as
// holding data are read, at most readMax bytes of them; the digest does not
// depend on which zeros are holes. buf holds one chunk. seekErr is the
// first answer of lseek that lseek(2) rules out ("": none; the walk's
// seek-answer check reports it): the digest then reads what the answer
// left in doubt, so it is the file's all the same.
func sparseDigest(fd int, size int64, buf []byte, readMax int64) (sum []byte, seekErr string, err error) {
	return sparseDigestWith(unix.Seek, fd, size, buf, readMax)
}

// sparseDigestWith is sparseDigest with seek for lseek(2).
func sparseDigestWith(seek seekFunc, fd int, size int64, buf []byte, readMax int64) (sum []byte, seekErr string, err error) {
	h := blake3.New()
	oracle.WriteAll(h, []byte(sparseDomain))
	note := func(format string, a ...any) {
		if seekErr == "" {
			seekErr = fmt.Sprintf(format, a...)
		}
	}
	var read int64
	for off := int64(0); off < size; {
		data, err := seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) || (err == nil && data >= size) {
			break // no data at or past off
		}
		if err != nil {
			return nil, "", fmt.Errorf("seek data at %d: %w", off, err)
		}
		if data < off {
			note("lseek(%d, SEEK_DATA) = %d: data before the offset asked", off, data)
			data = off
		}
		end, err := seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, "", fmt.Errorf("seek hole at %d: %w", data, err)
		}
		if end <= data || end > size {
			// A hole must lie past the data and not past the end. btrfs
			// answers -2^63, no error, for data ending at 2^63 (6.1 to at
			// least 6.18; docs/hunt.md): read to the end instead, which
			// hashes the same bytes, rather than seek forever.
			note("lseek(%d, SEEK_HOLE) = %d: want a hole past the data at %d, at most the size %d", data, end, data, size)
			end = size
		}
		c := data &^ (sparseChunk - 1)
		for ; c < end && c < size; c = nextChunk(c, size) {
			if read >= readMax {
				return sparseUnread(size), seekErr, nil
			}
			// Never past the end: at a chunk reaching 2^63 pos+count
			// would pass the largest offset, and the kernel refuses the
			// read (EINVAL, rw_verify_area).
			n, err := preadFull(fd, buf[:min(sparseChunk, size-c)], c)
			if err != nil {
				return nil, "", fmt.Errorf("read at %d: %w", c, err)
			}
			read += int64(n)
			if allZero(buf[:n]) {
				continue
			}
			oracle.WriteAll(h, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(c)), uint64(n)))
			oracle.WriteAll(h, buf[:n])
		}
		off = c
	}
	oracle.WriteAll(h, binary.LittleEndian.AppendUint64(nil, uint64(size)))
	return h.Sum(nil), seekErr, nil
}

// nextChunk is the chunk after the one at c of a file of size bytes, or
// size when c's is the last: a file whose data ends near 2^63 would
// overflow c+sparseChunk.
func nextChunk(c, size int64) int64 {
	if c > size-sparseChunk {
		return size
	}
	return c + sparseChunk
}

// sparseUnread is the digest of a file of the given size whose data is
// larger than sparseDigest reads: its size, and that it was not read.
func sparseUnread(size int64) []byte {
	h := blake3.New()
	oracle.WriteAll(h, []byte(sparseDomain+"unread\x00"))
	oracle.WriteAll(h, binary.LittleEndian.AppendUint64(nil, uint64(size)))
	return h.Sum(nil)
}

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// preadFull reads into buf from off until buf is full or the file ends,
// retrying EINTR; it returns the bytes read.
func preadFull(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := unix.Pread(fd, buf[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	return n, nil
}
