// Package sandbox runs a host tool (e2fsck, btrfs check, debugfs) over an
// image the guest wrote — untrusted bytes — so that a hostile image can
// make the tool fail, hang or crash but not hurt the host.
//
// Every run, everywhere:
//
//   - a timeout ([Limits.Timeout]); on expiry, or when the caller's
//     context ends, the whole process group is killed (SIGKILL);
//   - rlimits set on the tool before it execs (util-linux prlimit):
//     RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE; on a host without
//     prlimit (the emulated AMD-V host's minimal root) they are set on the
//     tool's pid right after its exec, and the result says so;
//   - its stdout and stderr together kept to [Limits.Output] bytes (the
//     head and the tail, a mark where the middle was cut), the rest read
//     and dropped;
//   - a signal that ends the tool is an error naming it ([ErrSignal]), a
//     timeout one naming the limit ([ErrTimeout]).
//
// Where the host allows (root, util-linux unshare; probed once, [Isolated]),
// the tool also runs in new mount, pid, network, ipc and uts namespaces with a
// private root: a tmpfs holding /usr (read-only), the merged-usr links,
// /dev/null, /dev/zero and /dev/urandom, an empty /etc/mtab and /proc/self/mounts (plain files: no procfs), a
// 16 MiB tmpfs /tmp, and the one image, bound read-only at /image. There
// is no /proc, /sys, /home, /root or host /tmp, no network but a down
// loopback, no other process. The tool keeps uid 0 but no capability (the
// bounding set cleared, no_new_privs; util-linux setpriv): it cannot mount,
// chroot, mknod, ptrace, or undo the read-only binds. Where the host does
// not allow it (not root, no unshare), [Why] says so and a run's [Result]
// carries the reason; the timeout, the limits and the output cap still
// hold.
//
// Not protected: /usr is readable (the tool's own libraries); the kernel
// itself (a bug in a syscall the tool makes); the number of processes
// (no cgroup; the pid namespace and the kill on timeout bound their
// lifetime); the image the caller passes must be its own copy — it is
// bound read-only, but the caller's other use of the file is its own.
//
// The package holds no state but the one-time probe; Run is safe for
// concurrent use. It imports nothing of this module.
package sandbox
