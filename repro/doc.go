// Package repro turns a finding into a standalone reproducer: a directory
// a kernel developer runs as root on any Linux with loop devices and the
// filesystems' tools, without Themis.
//
//   - repro.c: the trace as plain libc syscalls, with the flags, modes,
//     offsets and fill bytes the agent used (agent/inguest), run one step
//     at a time on every lane's mount point, and a listing of each lane's
//     abstract state (the fingerprint's fields, canonicalized by the
//     policy the finding was judged under);
//   - repro.sh: makes each lane's base image with the exact mkfs command
//     and environment (guest/baseimage.ShellCommand), loop-mounts it, builds
//     and runs repro.c (remounting between steps when the run reverted by
//     remount), prints what each lane returned and the state it left,
//     then the expected line (the finding) and the observed one;
//   - README: the finding, the lanes, the trace, the kernel it was made
//     on, the Themis version, and what the shell cannot do as Make does.
//
// Generate is pure (text in, files out as bytes); writing them is the
// caller's.
//
// Every string from outside (a finding's id, kind, detail and trace, a
// lane's spec, filesystem and mount options, the kernel, a crash's verdict
// and checker output) is quoted for the context it lands in: a shell word
// (single quotes), a shell comment or a line of the README (one printable
// line), a C string literal (octal escapes) or a C comment (no "*/", no
// line splice). The templates' data holds such strings as a type that
// prints only through those funcs (escape.go): a field printed raw fails
// the rendering, it is never written. The API refuses hostile lane names
// at the other end (guest.ParseLaneSpec); this holds without it.
package repro
