// Package hostfsck runs the host's read-only checker of a filesystem
// image: e2fsck -fn for ext2/3/4, btrfs check --readonly --check-data-csum
// for btrfs, each in internal/sandbox (timeout, rlimits, private root). Explore's fsck self-reference and the corruption runs' per-target
// check use it on a lane's resolved overlay image written to a scratch file;
// the crash checks (runs/crashcheck) first replay an ext3/4 image's journal
// into their private copy with Recover (e2fsck -E journal_only -y, the image
// bound writable in the sandbox for that step only).
package hostfsck
