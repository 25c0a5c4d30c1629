package bugs

import "github.com/themisfs/themis/api"

// Triaged is a stock kernel's finding that docs/hunt.md triages (a real
// bug of the stock kernel, or a documented difference): bench bugs adds
// it to every stock baseline of its filesystem, so that it is never a
// case's detection, even in a run whose own baseline check did not meet
// it (the exFAT stamp comes from timing: a baseline check can miss it
// where a case's check shows it).
type Triaged struct {
	FS  string // the lane filesystem
	Key string // FindingKey or CellKey
	Why string // where docs/hunt.md triages it
}

// TriagedStock are the stock findings docs/hunt.md triages as real bugs
// of the guest kernel. A case's finding of one of these keys is still its
// detection when the stock image keeps what its own trace lost (bench
// bugs' stockClean).
var TriagedStock = []Triaged{
	{FS: "exfat", Key: CellKey("exfat", "create", "mtime", "diverged"), Why: "docs/hunt.md: exFAT, a new file's mtime reads back 10 ms earlier after a remount"},
	{FS: "exfat", Key: CellKey("exfat", "mkdir", "mtime", "diverged"), Why: "docs/hunt.md: exFAT, a new directory's mtime reads back 10 ms earlier after a remount"},
	{FS: "exfat", Key: FindingKey("crash", "crash lost exfat after fsync of an empty file"), Why: "docs/hunt.md: exFAT, fsync of a new file in a directory that grew does not write the directory's new size: the name is lost"},
	{FS: "ext2", Key: FindingKey("crash", "crash lost ext2 after fsync of an empty file"), Why: "docs/hunt.md: ext2 (the ext4 driver without a journal), fsync of a new empty file is not durable"},
	{FS: "ext2", Key: FindingKey("crash", "crash lost ext2 after fsync of a file"), Why: "docs/hunt.md: ext2, the same early return loses a file with data whose inode is not I_DIRTY (the 10-minute stock baseline)"},
	{FS: "ext2", Key: FindingKey("crash", "crash lost ext2 after fsync of a directory"), Why: "docs/hunt.md: ext2, the same early return skips the cache flush after a directory's fsync"},
	{FS: "ext2", Key: FindingKey("crash", "crash lost ext2 after fdatasync of a file"), Why: "docs/hunt.md: ext2, fdatasync loses the size (most likely the same root cause)"},
	{FS: "f2fs", Key: FindingKey("crash", "crash lost f2fs after fsync of a file"), Why: "docs/hunt.md: f2fs (fsync_mode=posix), a file's fsync does not make durable the rename of an ancestor directory since the last checkpoint: its path is lost"},
	{FS: "btrfs", Key: FindingKindKey(api.KindSeekAnswer), Why: "docs/hunt.md: btrfs, SEEK_HOLE answers -2^63 for written data ending at 2^63"},
}

// TriagedKeys are the keys of TriagedStock of filesystem fs.
func TriagedKeys(fs string) []string {
	var out []string
	for _, t := range TriagedStock {
		if t.FS == fs {
			out = append(out, t.Key)
		}
	}
	return out
}
