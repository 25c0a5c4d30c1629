// Package oracle computes abstract-state fingerprints of a filesystem tree.
//
// A fingerprint is a two-level fold over blake3-256: every entry of a walk
// (an [agentv1.Entry]: path, kind, mode, owner, link count, size, content hash,
// symlink target and, depending on the [TimeMode], timestamps) is hashed on its
// own by [LeafHash] with a versioned, length-prefixed binary encoding, and
// [Fold] hashes the leaves in path byte order into one root. The guest agent
// and the host use the same code, so a root computed in the guest can be
// checked against leaves shipped to the host.
//
// Differences between filesystems that a comparison should ignore are
// removed by a named [Policy] ([Exact], [MetisParity]) through
// [Canonicalize] or [FoldPolicy], never by leaving fields out silently.
// Overlay upper layers are read dialect-free: [Classify] recognizes kernel
// overlayfs (whiteout char device 0:0, overlay.opaque xattr) and AUFS
// (".wh.<name>", ".wh..wh..opq") markers before any dispatch on file type,
// and [NormalizeUpper] turns them into the same symbolic entries. [Merge]
// is the overlay view those entries mean over a lower layer (lower ⊕
// upper): whiteouts delete, opaque directories hide, upper entries replace
// and add, and merged directories report overlayfs's nlink.
//
// Invariants: the encoding is canonical (one byte string per entry and mode);
// Fold does not depend on the order of its input; changing the encoding
// requires bumping the version constants below, which changes every root.
//
// The package is pure: it does no I/O, takes no time of its own and must not
// import os/exec, grpc or any vmm package. All functions are safe for
// concurrent use and never modify their arguments.
package oracle
