package inguest

import (
	"path"
	"strings"
	"syscall"
)

// Limits on names and paths the agent accepts.
const (
	maxLane      = 64
	maxComponent = 255
	maxPath      = 4096
)

// checkLane validates a lane name: non-empty, at most 64 bytes, no '/' or NUL,
// not "." or "..".
func checkLane(lane string) error {
	switch {
	case lane == "":
		return errorf(syscall.EINVAL, "empty lane name")
	case len(lane) > maxLane:
		return errorf(syscall.EINVAL, "lane name longer than %d bytes", maxLane)
	case lane == "." || lane == "..":
		return errorf(syscall.EINVAL, "bad lane name %q", lane)
	case strings.ContainsAny(lane, "/\x00"):
		return errorf(syscall.EINVAL, "bad lane name %q", lane)
	}
	return nil
}

// checkPath validates a lane-relative path: empty (the lane root) or
// relative, clean (no empty, "." or ".." components, no trailing slash), no
// NUL, components of at most 255 bytes, at most 4096 bytes in all (longer
// ones get ENAMETOOLONG, as from the kernel; the rest EINVAL).
func checkPath(p string) error {
	if p == "" {
		return nil
	}
	switch {
	case len(p) > maxPath:
		return errorf(syscall.ENAMETOOLONG, "path longer than %d bytes", maxPath)
	case strings.IndexByte(p, 0) >= 0:
		return errorf(syscall.EINVAL, "path contains NUL")
	case path.IsAbs(p):
		return errorf(syscall.EINVAL, "absolute path %q", p)
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return errorf(syscall.EINVAL, "path %q is not clean and relative", p)
	}
	for _, c := range strings.Split(p, "/") {
		if len(c) > maxComponent {
			return errorf(syscall.ENAMETOOLONG, "path component longer than %d bytes", maxComponent)
		}
	}
	return nil
}

// atPath is the name to pass to an *at system call for lane path p.
func atPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}
