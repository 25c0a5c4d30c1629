package family

import "slices"

// errnos the table names (Linux x86-64).
const (
	eperm        = 1
	einval       = 22
	eopnotsupp   = 95
	efbig        = 27
	enametoolong = 36
	eoverflow    = 75
)

// Op rules of renameat2's flags, as the guest kernel gives them (measured
// on 2026-12-03: RENAME_NOREPLACE everywhere; exchange and whiteout EINVAL
// where the filesystem's rename takes only RENAME_NOREPLACE).
var (
	noRenameExchange = OpRule{Op: "rename_exchange", Errno: einval, Effect: Excluded, Why: "no RENAME_EXCHANGE (EINVAL): the other lanes would swap the two"}
	noRenameWhiteout = OpRule{Op: "rename_whiteout", Errno: einval, Effect: Excluded, Why: "no RENAME_WHITEOUT (EINVAL): the other lanes would leave a whiteout"}
)

// farSizes are every family's op rules for the far op kinds: a write or
// truncate at a file size limit (explore.FarLengths). Each filesystem's
// limit is its own (ext4's depends on its block size, vfat's is 4 GiB), so
// a run of two or more lanes leaves them out; a run of one lane tries them.
var farSizes = []OpRule{
	{Op: "write_far", Errno: efbig, Effect: Excluded, Why: "its maximum file size is its own: the other lanes would write where it gives EFBIG, or the reverse"},
	{Op: "truncate_far", Errno: efbig, Effect: Excluded, Why: "its maximum file size is its own: the other lanes would truncate where it gives EFBIG, or the reverse"},
}

// noXattrs are the op rules of a filesystem without extended attributes:
// the state records none, so the errno is all that differs.
var noXattrs = []OpRule{
	{Op: "setxattr", Errno: eopnotsupp, Effect: Tolerated, Why: "no extended attributes (the state records none)"},
	{Op: "removexattr", Errno: eopnotsupp, Effect: Tolerated, Why: "no extended attributes (the state records none)"},
}

// fatOps are the op rules of vfat and exfat (mounted with the defaults:
// uid and gid of the mounter, fmask and dmask 022, no "quiet").
var fatOps = append([]OpRule{
	{Op: "symlink", Errno: eperm, Effect: Excluded, Why: "no symbolic links: the other lanes would have one"},
	{Op: "link", Errno: eperm, Effect: Excluded, Why: "no hard links: the other lanes would count two"},
	{Op: "chmod", Errno: eperm, Effect: Tolerated, Why: "modes are the mount's masks; a change they cannot store is refused"},
	{Op: "chown", Errno: eperm, Effect: Tolerated, Why: "owners are the mount's uid and gid"},
	{Op: "chgrp", Errno: eperm, Effect: Tolerated, Why: "owners are the mount's uid and gid"},
}, noXattrs...)

// dirSize is every family's: directory sizes are allocation artifacts.
var dirSize = FieldRule{Field: DirSize, Why: "a directory's size is how its filesystem allocates entries (ext2 a block, btrfs the names' lengths)"}

// Table is every lane filesystem's family, the one place their declared
// differences live (docs/filesystems.md shows it).
var Table = []Family{
	{
		Name: "ext", FS: []string{"ext2", "ext3", "ext4"}, Mkfs: "mkfs.ext2/3/4", Fsck: "e2fsck -fn", Package: "e2fsprogs", Quiesce: Sync,
		Fields: []FieldRule{dirSize, {Field: LostFound, Why: "mke2fs makes /lost+found"}},
		Ops:    farSizes,
		Time:   "128-byte inodes: 1901-12-13 to 2038-01-19 at 1 s; 256-byte: to 2446-05-10 at 1 ns",
	},
	{
		Name: "btrfs", FS: []string{"btrfs"}, Module: "btrfs", Mkfs: "mkfs.btrfs", Fsck: "btrfs check --readonly", Package: "btrfs-progs", Quiesce: Sync,
		Fields: []FieldRule{dirSize,
			{Field: RootNlink, Why: "a btrfs directory's nlink is 1: it counts no subdirectories"},
			{Field: DirNlink, Why: "a btrfs directory's nlink is 1: it counts no subdirectories"}},
		Ops: slices.Concat(farSizes, []OpRule{{Op: "collide", Errno: eoverflow, Effect: Excluded,
			Why: "btrfs keeps the names of one crc32c hash in one item of a leaf and refuses one past what it holds (EOVERFLOW): the other lanes would make it"}}),
		Time: "signed 64-bit seconds at 1 ns",
	},
	{
		Name: "xfs", FS: []string{"xfs"}, Module: "xfs", Mkfs: "mkfs.xfs", Fsck: "xfs_repair -n", Package: "xfsprogs", Quiesce: Remount,
		Fields: []FieldRule{dirSize},
		Ops:    farSizes,
		Time:   "bigtime=1: 1901-12-13 to 2486-07-02 at 1 ns; bigtime=0: to 2038-01-19 at 1 ns",
	},
	{
		Name: "vfat", FS: []string{"vfat"}, Module: "vfat", Mkfs: "mkfs.vfat", Package: "dosfstools", Quiesce: Sync,
		Fields: []FieldRule{dirSize,
			{Field: Owner, Why: "FAT stores no owner: every file has the mount's uid and gid"},
			{Field: Mode, Why: "FAT stores a read-only bit: modes are the mount's fmask and dmask"}},
		Ops:     slices.Concat(fatOps, []OpRule{noRenameWhiteout}, farSizes),
		Time:    "1980-01-01 to 2107-12-31; mtime 2 s, ctime 10 ms, atime a day",
		MaxFile: 1<<32 - 1, // fat_fill_super: a 32-bit size
	},
	{
		Name: "exfat", FS: []string{"exfat"}, Module: "exfat", Mkfs: "mkfs.exfat", Fsck: "fsck.exfat -n", Package: "exfatprogs", Quiesce: Sync,
		Fields: []FieldRule{dirSize,
			{Field: Owner, Why: "exFAT stores no owner: every file has the mount's uid and gid"},
			{Field: Mode, Why: "exFAT stores a read-only bit: modes are the mount's fmask and dmask"}},
		Ops:  slices.Concat(fatOps, []OpRule{noRenameExchange, noRenameWhiteout}, farSizes),
		Time: "1980-01-01 to 2107-12-31; mtime and ctime 10 ms, atime 2 s",
	},
	{
		Name: "udf", FS: []string{"udf"}, Module: "udf", Mkfs: "mkudffs", Package: "udftools", Quiesce: Sync,
		Fields:  []FieldRule{dirSize},
		Ops:     slices.Concat(noXattrs, []OpRule{noRenameExchange, noRenameWhiteout}, farSizes),
		Time:    "year 1 to 9999 (a 16-bit year), 1 µs",
		MaxFile: 1 << 42, // UDF_MAX_FILESIZE (c2efd13a2ed4, in 6.1 stable): a file's extents list is bounded
	},
	{
		Name: "f2fs", FS: []string{"f2fs"}, Module: "f2fs", Mkfs: "mkfs.f2fs", Fsck: "fsck.f2fs --dry-run", Package: "f2fs-tools", Quiesce: Sync,
		Fields: []FieldRule{dirSize},
		Ops:    farSizes,
		Time:   "signed 64-bit seconds at 1 ns (the generic kernel flavour)",
	},
	{
		Name: "minix", FS: []string{"minix"}, Module: "minix", Mkfs: "mkfs.minix -3", Fsck: "fsck.minix -f", Package: "util-linux", Quiesce: Sync,
		Fields: []FieldRule{dirSize},
		Ops: slices.Concat(noXattrs, []OpRule{noRenameExchange, noRenameWhiteout}, farSizes, []OpRule{{Op: "collide", Errno: enametoolong, Effect: Excluded,
			Why: "names of at most 60 bytes (mkfs.minix -3): the other lanes would make the burst's 200-byte names"}}),
		Time:    "unsigned 32-bit seconds, 1970 to 2106, at 1 s (the generic kernel flavour)",
		MaxFile: 1<<31 - 1, // the s_max_size mkfs.minix -3 writes
	},
	{
		Name: "nilfs2", FS: []string{"nilfs2"}, Module: "nilfs2", Mkfs: "mkfs.nilfs2", Package: "nilfs-tools", Quiesce: Sync,
		Fields: []FieldRule{dirSize, {Field: Sketch, Why: "mkfs.nilfs2 makes /.nilfs, the sketch file each checkpoint records"}},
		Ops:    slices.Concat(noXattrs, []OpRule{noRenameExchange, noRenameWhiteout}, farSizes),
		Time:   "signed 64-bit seconds at 1 ns (the generic kernel flavour)",
	},
	{
		Name: "overlay", FS: []string{"overlay"}, Module: "overlay", Mkfs: "mkfs.ext2 (both layers)", Fsck: "e2fsck -fn (upper layer)", Package: "e2fsprogs", Quiesce: Sync,
		Fields: []FieldRule{dirSize, {Field: LostFound, Why: "the ext2 lower layer's /lost+found shows through"},
			{Field: RootNlink, Why: "overlayfs reports nlink 1 for a merged directory, and the root always is one"},
			{Field: DirNlink, Seeded: true, Why: "over a populated lower layer every directory an op copies up is merged (nlink 1)"}},
		Ops:  farSizes,
		Time: "its upper layer's (ext2, 128-byte inodes)",
	},
}
