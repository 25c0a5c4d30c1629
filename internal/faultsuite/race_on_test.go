//go:build race

package faultsuite

// raceFlags build the suite's themisd as the test binary is built, so
// that its packages come from the build cache the test's build filled.
var raceFlags = []string{"-race"}
