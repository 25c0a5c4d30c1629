// Package kvmtest holds the one rule for tests that need /dev/kvm: they
// run where the host has it, skip with the reason where it has none, and
// fail under THEMIS_REQUIRE_KVM=1, where a skip would hide a broken
// backend. CI hosts may have no /dev/kvm at all (docs/platform.md), so
// CI=true alone does not require it: there the KVM backend's tests that
// hardware virtualization changes run inside an emulated AMD-V host
// (cmd/themis-nested, counted by internal/testcount).
package kvmtest
