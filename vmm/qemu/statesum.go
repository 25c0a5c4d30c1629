package qemu

import (
	"fmt"
	"hash/crc32"
	"os"

	"golang.org/x/sys/unix"

	"github.com/themisfs/themis/internal/memguard"
	"github.com/themisfs/themis/vmm"
)

// stateSum guards the state image (stateImage, where snapshot-save keeps
// the CPU and device state of every checkpoint) against a change that was
// not QEMU's on our behalf: a bit flip or a truncation in the scratch dir.
// QEMU's snapshot format has no checksum of its own, and snapshot-load
// loads what it finds. After every snapshot job, once QEMU has flushed the
// image, its size and CRC-32C are taken (took); before the next job they
// must still be those (check), else the job is refused with vmm.ErrCorrupt,
// and so is every later one: a damaged image is never loaded, nor added to
// and then summed as good.
//
// CRC-32C, not a cryptographic hash: it is for damage, not for an attacker
// (who could write the image could write the daemon's RAM), and it reads
// the image at memory speed (3.4 ms for 13 MiB on 2 shared cores, the
// mapping included; blake3 through read(2) took 12 ms): the image is
// summed twice per checkpoint, restore and delete.
//
// Only in vmm.RestoreDevices mode, where the image holds device state
// (about 0.5 MiB a checkpoint, growing to the most checkpoints held: qcow2
// does not shrink); in vmm.RestoreFull mode it holds all of RAM per
// checkpoint, and summing it at every job would be O(RAM × checkpoints).
type stateSum struct {
	path string
	size int64
	crc  uint32
	set  bool  // size and crc are the image after the last job
	bad  error // the first failed check: every later one fails with it
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// check fails unless the image is as the last job left it (or no job ran).
func (s *stateSum) check() error {
	if s == nil || !s.set {
		return nil
	}
	if s.bad != nil {
		return s.bad
	}
	size, crc, err := sumFile(s.path)
	if err != nil {
		return fmt.Errorf("qemu: checkpoint state %s: %w", s.path, err)
	}
	if size != s.size || crc != s.crc {
		s.bad = fmt.Errorf("qemu: checkpoint state %s: %d bytes, CRC-32C %08x; %d bytes, %08x after the last snapshot job: changed outside QEMU: %w",
			s.path, size, crc, s.size, s.crc, vmm.ErrCorrupt)
		return s.bad
	}
	return nil
}

// took records the image as a snapshot job left it.
func (s *stateSum) took() error {
	if s == nil || s.bad != nil {
		return nil
	}
	size, crc, err := sumFile(s.path)
	if err != nil {
		return fmt.Errorf("qemu: checkpoint state %s: %w", s.path, err)
	}
	s.size, s.crc, s.set = size, crc, true
	return nil
}

// sumFile is the size and CRC-32C of the file at path, read through a
// mapping (guarded: a file cut short under it is an error, not a SIGBUS).
func sumFile(path string) (size int64, crc uint32, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 0, 0, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return 0, 0, fmt.Errorf("mmap: %w", err)
	}
	ferr := memguard.Run(func() { crc = crc32.Checksum(mem, castagnoli) })
	if err := unix.Munmap(mem); err != nil {
		return 0, 0, fmt.Errorf("munmap: %w", err)
	}
	return fi.Size(), crc, ferr
}
