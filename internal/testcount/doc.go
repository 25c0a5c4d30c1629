// Package testcount reads `go test -json` output and counts the tests that
// ran (passed or failed, not skipped) whose names match a pattern. The
// hardware-KVM job uses it (through cmd/testcount) to assert that the gated
// Linux-on-KVM tests really ran instead of skipping.
package testcount
