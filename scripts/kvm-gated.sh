#!/usr/bin/env bash
# kvm-gated.sh: run the Linux-on-KVM tests that need hardware virtualization
# (vmx/svm) and fail unless they really ran. For hosts where `themisctl
# doctor` says kvm_kind "hardware"; on PVM hosts these tests skip, so this
# script fails there by design.
#
#   scripts/kvm-gated.sh            # needs the guest image (themisctl guest build)
set -euo pipefail
cd "$(dirname "$0")/.."
export THEMIS_REQUIRE_KVM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# go test's own status is checked below through the counts; keep its output.
set +e
go test -json -count=1 -timeout 30m -run '^TestKVMLinux' ./vmm/kvm/... >"$out"
status=$?
set -e
go run ./cmd/testcount -run '^TestKVMLinux' -min 2 <"$out"
exit "$status"
