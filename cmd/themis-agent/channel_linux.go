package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// waitHost waits up to wait for the host end of a virtio port to be
// connected: until it is, the port polls POLLHUP and a read sees end of
// file, which would end the agent's Serve at once.
func waitHost(f *os.File, wait time.Duration) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	deadline := time.Now().Add(wait)
	for {
		var revents int16
		var perr error
		err := rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			_, perr = unix.Poll(fds, 0)
			revents = fds[0].Revents
		})
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", f.Name(), err)
		case perr != nil && !errors.Is(perr, unix.EINTR):
			return fmt.Errorf("poll %s: %w", f.Name(), perr)
		case perr == nil && revents&unix.POLLHUP == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%s: host end not connected after %v", f.Name(), wait)
		}
		time.Sleep(portPoll)
	}
}
