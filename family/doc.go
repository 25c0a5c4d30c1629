// Package family is the table of lane filesystems, grouped by family (ext,
// btrfs, xfs, vfat, exfat, udf, overlay): for each, what it legitimately
// does differently from POSIX as ext2 implements it, declared as data in
// one place ([Table]) rather than as conditions scattered over the
// checker:
//
//   - fields that carry no meaning there ([Field]: a btrfs directory's
//     nlink, directory sizes, vfat and exfat owners and mode bits);
//   - ops it does not support and the errno it gives ([OpRule]): those
//     that would change the state elsewhere (a vfat symlink) are left out
//     of a differential run, those whose effect the state does not record
//     or a field rule covers (a vfat chmod) are tolerated;
//   - how its image is made consistent for the host checker ([Quiesce]).
//
// A differential run picks its canonicalization from its lanes ([Judge]):
// Metis's rules plus every field any lane's family declares. The run counts
// what was judged by a declared difference, and the exact policy
// (oracle.Exact) turns all of it off. Time rules are package clock's
// (clock.RuleFor); the table names them for the docs.
package family
