package explore

import (
	"math/rand/v2"
	"slices"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// OpRegrow is the burst op kind of the post-EOF zeroing class: it writes
// a file from offset 0 (O_CREAT, a fill that is not zero), truncates it
// down to a length inside what it wrote, then grows it past that length
// again, by a truncate up or by a write beyond the new end (drawn). The
// bytes between the shrunk end and the grown one must then read as zeros.
// A filesystem that zeroes the cut-off tail only in the page cache (and
// never on disk), or leaves it in an inline-data area, shows the old bytes
// there once the cache is gone (xfstests' post-EOF zeroing tests, generic/
// 393 for f2fs's inline data). Under the remount revert every one of the
// burst's ops runs on freshly mounted lanes, as separate ops do: the
// shrunk tail is on disk before the grow reads it back. Half the bursts
// (drawn) append at the new end before the grow, and the grow then runs in
// the append's mount (Request.keep_mount), as fsx runs its ops: the block
// read back from disk by the append, and whatever the filesystem keeps in
// memory about how far its file is initialized, are what the grow works
// from (FAT's mmu_private: c0ef0cc9d277, "fat: fix data past EOF resulting
// from fsx testsuite"). A burst is one op of the search (one step, one
// depth), three or four ops of the trace. Off by default; check turns it
// on.
const OpRegrow = "regrow"

// regrowFills are a regrow's write fills: not zero, which a stale tail
// could not be told from.
var regrowFills = slices.DeleteFunc(slices.Clone(Fills), func(f uint32) bool { return f == 0 })

// buildRegrow draws a regrow of file: the write of size, the truncate to
// a shorter length, at times an append at that length, then the grow (in
// the append's mount), each length from the bins lengths.
func buildRegrow(rng *rand.Rand, file string, lengths []int64) *agentv1.Request {
	top := lengths[len(lengths)-1]
	size := pick(rng, between(lengths, 2, top))
	cut := pick(rng, between(lengths, 1, size-1))
	ops := []*agentv1.Request{
		{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: file, Flags: oRdwr | oCreat, Size: size, Fill: pick(rng, regrowFills)}}},
		{Op: &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Path: file, Length: cut}}},
	}
	end := cut // the file's size before the grow
	if rng.IntN(2) == 0 {
		n := pick(rng, between(lengths, 1, top))
		ops = append(ops, &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{Path: file, Flags: oRdwr,
			Offset: cut, Size: n, Fill: pick(rng, regrowFills)}}})
		end = cut + n
	}
	grow := &agentv1.Request{KeepMount: end > cut}
	if rng.IntN(2) == 0 {
		grow.Op = &agentv1.Request_Truncate{Truncate: &agentv1.Truncate{Path: file, Length: pick(rng, between(lengths, end+1, max(top, end+1)))}}
	} else {
		grow.Op = &agentv1.Request_Write{Write: &agentv1.Write{Path: file, Flags: oRdwr,
			Offset: pick(rng, between(lengths, end+1, max(top, end+1))), Size: pick(rng, between(lengths, 1, top)), Fill: pick(rng, regrowFills)}}
	}
	return &agentv1.Request{Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: append(ops, grow)}}}
}

// between are the bins of lengths (ascending) from lo to hi, or lo alone
// when no bin lies there (callers keep lo <= hi).
func between(lengths []int64, lo, hi int64) []int64 {
	i, _ := slices.BinarySearch(lengths, lo)
	j, found := slices.BinarySearch(lengths, hi)
	if found {
		j++
	}
	if i >= j {
		return []int64{lo}
	}
	return lengths[i:j]
}
