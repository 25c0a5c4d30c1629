// Package shards joins the results of the shards of one search (explore
// with shard_index/shard_count, each an ExploreResult as `themisctl --json
// explore --shard i/n` prints it) into what the whole search run at once
// reports (a MergeExploreResponse): the union of their states and its digest, the
// unique states by depth, the declared-difference counts, and each finding
// once (explore.Merge keeps, per signature, the one found along the
// shortest trace). It checks first that the parts are every shard of one
// search, once each, none stopped early.
//
// `themisctl explore merge` calls it on files, without a daemon; the
// daemon's MergeExplore RPC on the messages a remote client sends. Pure:
// no I/O.
package shards
