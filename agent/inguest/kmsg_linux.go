package inguest

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// readKmsg returns up to max records of the kernel log at path (/dev/kmsg)
// with a sequence number above after, oldest first, without blocking.
func readKmsg(path string, after uint64, max int) ([]*agentv1.KmsgLine, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	lines, err := readKmsgFd(fd, after, max)
	if cerr := unix.Close(fd); cerr != nil && err == nil {
		err = fmt.Errorf("close %s: %w", path, cerr)
	}
	return lines, err
}

func readKmsgFd(fd int, after uint64, max int) ([]*agentv1.KmsgLine, error) {
	var lines []*agentv1.KmsgLine
	buf := make([]byte, 16<<10) // a record is at most ~8 KiB with its dictionary
	for len(lines) < max {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return lines, nil
		case errors.Is(err, unix.EPIPE), errors.Is(err, unix.EINTR):
			continue // EPIPE: records were overwritten before we read them
		case err != nil:
			return lines, fmt.Errorf("read: %w", err)
		case n <= 0:
			return lines, nil
		}
		if l, ok := parseKmsg(buf[:n]); ok && l.Seq > after {
			lines = append(lines, l)
		}
	}
	return lines, nil
}
