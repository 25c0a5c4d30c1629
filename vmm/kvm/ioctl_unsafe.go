//go:build linux

package kvm

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlPtr issues an ioctl whose argument is a pointer to *p.
func ioctlPtr[T any](fd int, name string, op uintptr, p *T) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), op, uintptr(unsafe.Pointer(p)))
	if errno != 0 {
		return 0, &IoctlError{Op: name, Err: errno}
	}
	return int(r), nil
}

// ioctlVal issues an ioctl whose argument is an integer.
func ioctlVal(fd int, name string, op, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), op, arg)
	if errno != 0 {
		return 0, &IoctlError{Op: name, Err: errno}
	}
	return int(r), nil
}

// runOnce issues KVM_RUN and returns the raw errno for the run loop's switch.
func runOnce(fd int) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmRun, 0)
	return errno
}

// addrOf is the userspace address of b's first byte, for memslots. b must
// be memory the Go runtime does not move (an mmap).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// getDirtyLog fills bm (a Go slice; kept alive across the call) with the
// slot's dirty bitmap.
func getDirtyLog(vmfd int, slot uint32, bm []uint64) error {
	l := dirtyLog{Slot: slot, Bitmap: uint64(uintptr(unsafe.Pointer(&bm[0])))}
	_, err := ioctlPtr(vmfd, "KVM_GET_DIRTY_LOG", kvmGetDirtyLog, &l)
	runtime.KeepAlive(bm)
	return err
}

// clearDirty re-protects the pages set in bm (KVM_CLEAR_DIRTY_LOG).
func clearDirty(vmfd int, slot uint32, pages uint32, bm []uint64) error {
	c := clearDirtyLog{Slot: slot, NumPages: pages, FirstPage: 0, Bitmap: uint64(uintptr(unsafe.Pointer(&bm[0])))}
	_, err := ioctlPtr(vmfd, "KVM_CLEAR_DIRTY_LOG", kvmClearDirtyLog, &c)
	runtime.KeepAlive(bm)
	return err
}
