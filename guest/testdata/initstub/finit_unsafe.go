package main

import (
	"syscall"
	"unsafe"
)

// sysFinitModule is finit_module(2) on x86-64.
const sysFinitModule = 313

var emptyParams = []byte{0} // finit_module needs a valid pointer to ""

func finitModule(fd uintptr) syscall.Errno {
	_, _, errno := syscall.Syscall(sysFinitModule, fd, uintptr(unsafe.Pointer(&emptyParams[0])), 0)
	return errno
}
