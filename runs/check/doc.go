// Package check is `themisctl check` (the Check RPC): what a filesystem
// developer needs for some lanes, in one time budget, as one run. It plans
// parts over the lanes and runs them side by side (up to Options.Parallel
// at once, auto sideBySide), each an existing run in sessions of its own:
//
//   - clock: the clock sweep (runs/clocksweep) of the lanes with clock
//     rules; each cell whose verdict is not the one the lane's rule expects
//     is a finding (docs/clock.md);
//   - differential: the lanes explored against each other
//     (runs/exploration), with a reference lane of another family added
//     when one lane is given (family.Reference);
//   - reference: each lane explored alone against its own references: the
//     state must survive umount+mount, and the host checker must find the
//     image clean where the lane has one;
//   - crash: each lane with a host checker explored with the crash states
//     of every persistence op checked (explore --crash, machine revert).
//
// Kernel crashes are findings in every part (the explore runs' kernel
// findings, the sweep's kernel-crash cells). The budget is shared: the clock
// part may take a quarter of it (at least a minute); an explore part that
// starts with a slot for it and every part after it runs to the end, else
// it gets its weight's share of the slots' time to the end that the
// running parts leave (share), so the time a part leaves over goes to the
// parts after it. An explore part runs the full tree to
// its depth, then, while a run covers its space with time left, rounds of
// bounded random walks deeper (explore.Config.Walks). As with explore's
// max-seconds, a part's
// share bounds its search; boots and the minimization of findings are not
// counted.
package check
