// Package crash chooses the disks a power cut could leave from a write log
// (overlay.Device.StartLog): which logged writes each crash state keeps.
// The disks themselves are overlay crash views, never copies.
//
// # Model
//
// The log is the writes and flushes one lane's disk received, in order,
// from a point whose image is taken as durable (the log's start). A
// completed flush makes every write before it durable; between two
// flushes (an epoch) the device may have written any of the epoch's
// writes and not others, in any order. A power cut during epoch e leaves
// every write of the epochs before e and any subset of e's writes, each
// as that write left its sectors. (FUA writes never reach the device
// here: virtio-blk has no FUA, and the guest's block layer sends a write
// then a flush instead, which the log records as such.) This is the model
// of CrashMonkey and B3, with the crash point anywhere rather than only
// at a persistence point.
//
// Enumerate lists, per epoch: the prefixes of its writes (a crash after
// each write, in order; the last epoch's full prefix is the disk as the
// guest left it), then the subsets of up to MaxSubset of its writes that
// are not prefixes (the device reordered them), fewest writes first; at
// most MaxStates in all, prefixes first. Every state says how many
// flushes had completed before it (Flushes): what an oracle may expect to
// be durable.
//
// Pure: no I/O, deterministic.
package crash
