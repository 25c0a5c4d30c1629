// Package belowfs holds the runs that look below the filesystem, at the
// lane's block device: Profile (sectors written and read per op, the
// paper's Tables 2 and 4, with the on-disk layout in two views) and Corrupt
// (one bit flipped on a fork branch, the blast radius of Table 11, checked
// by a cold mount, a walk and the host fsck). Each leases a session of its
// own (session.Manager.Acquire) and reads the lanes' overlays through the
// run (session.Run.Disk); block owners come from the parsed image (fsimage).
// A flip whose mount (or the reads after it) kills the guest is a result
// of the death's class (kernel-crash with the kernel's report; package
// relay), and Corrupt goes on in a fresh session, the setup run again.
//
// Files: profile.go is Profile; corrupt.go is Corrupt's options, results
// and its loop over lanes and targets; target.go parses a target
// (ParseTarget) and holds the ext field tables; resolve.go finds a
// target's bit on an image (ext through fsimage, btrfs, or a raw LBA;
// the corrupter's resolver picks the parser, xfs too); observe.go is
// what a flip's branch shows (the cold mount, the walk against the clean
// branch, the host fsck).
package belowfs
