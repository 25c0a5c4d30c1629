//go:build !race

package faultsuite

// raceFlags build the suite's themisd as the test binary is built (see
// race_on_test.go).
var raceFlags []string
