// Package clock models time as a search axis: adversarial timestamp values
// and plans of them, what each filesystem can store (Expect), and how a
// stored timestamp relates to the one that was set (Classify).
//
// The rules mirror the Linux kernel: every timestamp the VFS stores passes
// timestamp_truncate, which clamps the seconds into the superblock's
// [s_time_min, s_time_max] (zeroing the nanoseconds at a bound) and then
// truncates to s_time_gran. ext2/3/4 with 128-byte inodes store a signed
// 32-bit second and no nanoseconds; with larger inodes ext4 adds an *_extra
// word (2 epoch bits and 30 bits of nanoseconds, ext4_encode_extra_time),
// for [-2^31, 2^34-2^31-1] = up to 2446-05-10T22:38:55Z. vfat stores local
// time (the guest runs UTC) from 1980 to 2107 with 2-second mtime, 10 ms
// ctime (creation time) and date-only atime.
//
// A sweep cell sets one value, runs one op and reads three views back: the
// guest's stat, the inode on disk, and stat after umount+mount. [Classify]
// turns them into a [Verdict]: represented, clamped (to what), wrapped,
// rounded (to what granularity), rejected (errno), or diverged (the views
// disagree — a persistence bug).
//
// The package is pure: no I/O, no time of its own (time.Date only converts
// constants), and it must not import os/exec, grpc or any vmm package
// (internal/arch checks). Plans are decoded from bytes the caller read;
// a sweep's rows ([Row], [MergeRows] for the shards of one sweep) come
// from the caller, which reads them as the API's cells.
// Everything is safe for concurrent use.
package clock
