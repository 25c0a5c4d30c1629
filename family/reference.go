package family

import "fmt"

// Reference is the lane a single-lane check compares with (themisctl
// check): a filesystem of another family, POSIX-complete, whose module is
// in every guest image of both kernel flavours (guest.DefaultModules and
// the ext module of each). It returns the lane spec and why that one.
func Reference(fs string) (lane, why string, err error) {
	f, err := Of(fs)
	if err != nil {
		return "", "", err
	}
	if f.Name == "ext" {
		return "xfs", "xfs: another family than ext, POSIX-complete, in every guest image", nil
	}
	return "ext2", fmt.Sprintf("ext2: the POSIX reference as Metis takes it, another family than %s", f.Name), nil
}

// crashRepaired are the lane filesystems that promise no consistency after
// a crash: no journal, log or copy-on-write, so a crash leaves what their
// fsck repairs (ext2's leaked blocks and half-made entries, a FAT's lost
// clusters). A "dirty" crash state of one is expected; what an fsync made
// durable must still be there.
var crashRepaired = map[string]string{
	"ext2":  "ext2 has no journal",
	"vfat":  "FAT has no journal",
	"exfat": "exFAT has no journal",
	"minix": "minix has no journal",
	"udf":   "this udf has no journal (no VAT, no metadata log)",
}

// CrashRepaired reports whether a crash of filesystem fs may leave an
// image its fsck must repair, and why ("" when a crash leaves it
// consistent: a journal, a log or copy-on-write).
func CrashRepaired(fs string) (bool, string) {
	why, ok := crashRepaired[fs]
	return ok, why
}

// fsyncNameless are the lane filesystems whose fsync writes the fsync'd
// inode and its blocks and nothing else (generic_file_fsync): not the
// directory entry that names a new or moved file, nor the inodes a
// directory's new entries name. fsync(2) allows it ("does not necessarily
// ensure that the entry in the directory containing the file has also
// reached disk"); ext2 served by the ext4 driver syncs the parent
// (ext4_sync_parent), so it is not here.
var fsyncNameless = map[string]string{
	"minix": "minix's fsync is generic_file_fsync: the fsync'd inode and its blocks, not the entry naming it nor the inodes a directory's entries name",
}

// FsyncNameless reports whether filesystem fs's fsync may leave out the
// names leading to what it made durable, and why: a crash state that
// lacks only such a name lost nothing the filesystem promised.
func FsyncNameless(fs string) (bool, string) {
	why, ok := fsyncNameless[fs]
	return ok, why
}
