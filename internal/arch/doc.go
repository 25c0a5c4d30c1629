// Package arch holds tests that keep the dependency rules of docs/design.md:
// the pure packages (explore, oracle, clock, family, fsimage, fsimage/btrfs, fsimage/xfs, fsimage/nilfs2, report, runreport, junit) never import a VMM
// backend, grpc or os/exec.
package arch
