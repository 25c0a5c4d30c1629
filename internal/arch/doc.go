// Package arch holds tests that keep the dependency rules and the map of
// the tree true (docs/architecture.md):
//
//   - the pure packages (explore, oracle, clock, family, fsimage,
//     fsimage/btrfs, fsimage/xfs, fsimage/nilfs2, report, runreport, junit,
//     crash) never import a VMM backend, grpc or os/exec
//     (TestPurePackagesStayPure);
//   - session, the daemon's core, reaches no run nor what only the runs
//     need (TestSessionHoldsNoRuns);
//   - every package of the module has its row in docs/architecture.md
//     (TestEveryPackageHasItsRow);
//   - no non-test function is longer than 100 lines but the agent's
//     request switch (TestFunctionsFitOnAScreen);
//   - cmd/themisctl imports nothing of the daemon's side (server,
//     session, runs/...): it speaks the API through client and starts a
//     daemon through package embedded (TestCLIReachesTheDaemonThroughItsAPI);
//   - vmm/kvm's non-test files hold no assembler and no echo guest: those
//     live in vmm/kvm/x86asm and vmm/kvm/echo (TestVMMHoldsOnlyTheVMM).
package arch
