// Package inguest is the agent's in-guest side: the [Server] that
// cmd/themis-agent runs as PID 1 and that answers the host's agent.Client
// over the frames of package agent.
//
// The server applies each request with one or a few system calls relative
// to the lane's directory (Root/<lane>) and reports the errno of the failing
// call. A lane operation's errno is a result the checker compares, not a
// failure of the agent. Operations that act on the whole machine (Mount,
// Umount, SetClock, DropCaches, Exec) run only when [Server.Machine] is set,
// so tests and fuzzing on a host cannot change the host.
//
// An overlay lane (Mount with fstype "overlay") is kernel overlayfs at
// Root/<lane> over a lower layer mounted read-only and an upper layer, both
// under [Server.Layers]; a Mount asking for metacopy=on is refused. A
// Fingerprint with below walks the lane's upper directory instead, reading
// each entry's device number and overlay.* xattrs, and classifies kernel
// whiteouts and opaque directories with oracle.NormalizeUpper before
// anything looks at their type; one with lower walks its lower layer (for
// the lower ⊕ upper reference, oracle.Merge). The layer paths hold the
// lane's name, whose ':' overlayfs's mount options get escaped.
//
// A Walk is ls -l or find -ls without the output: lstat of a path, its
// entries and, recursively, every directory below, reading no file
// contents; it is bounded in entries and depth and fails (E2BIG, ELOOP)
// rather than return a partial count.
//
// A Batch (at most [MaxBatch] requests, none a batch) runs its requests in
// order through Handle and answers them in one response; answers that
// would overflow the reply frame become E2BIG, the rest stay. The host
// sends an op on every lane and the fingerprints after it as one batch.
//
// Concurrency: [Server.Handle] is safe for concurrent use; [Server.Serve]
// handles one request at a time.
//
// Linux-only code lives in *_linux.go files; on other systems every
// operation answers ENOSYS.
package inguest
