// Package vmmtest is the conformance suite every vmm.Machine backend runs:
// boot to agent-ready, the Y2038 witness on a real ext2 -I 128 lane, fork and
// restore soundness with the verify gate (RAM and disk hashes), nested
// checkpoints, stale translated code after a restore, clean failure when
// the guest dies or hangs (no leaked processes or fds), and the failure
// policy both backends share (vmm/checkpoint): a restore that fails the
// verify gate breaks the machine, and every later call says so.
//
// The suite assembles its guests with launch.Boot (the backend under test
// as launch.Spec.Start), so it boots them the way the daemon does; Env.Lane
// and Env.Config are the same steps (launch.OpenDisk, launch.LaneSerial)
// for tests that start a backend themselves. RequireKVM asks launch.Choose
// for kvm.
//
// The suite needs a real guest image (guest.Build) and real base images made
// by mkfs. Where those cannot be had, tests skip with the reason, except
// under CI=true, where they fail.
package vmmtest
