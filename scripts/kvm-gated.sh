#!/usr/bin/env bash
# kvm-gated.sh: run the Linux-on-KVM tests that need hardware virtualization
# (vmx/svm) and fail unless they really ran.
#
#   scripts/kvm-gated.sh            # on a host whose /dev/kvm is hardware
#                                   # virtualization (themisctl doctor: kvm_kind
#                                   # "hardware"); on PVM hosts they skip, so
#                                   # this fails there by design
#   scripts/kvm-gated.sh --nested   # anywhere with QEMU: inside an emulated
#                                   # AMD-V host (QEMU TCG, -cpu qemu64,+svm,+npt,
#                                   # real kvm-amd), plus explore and a clock
#                                   # sweep on --backend kvm there against QEMU
#                                   # here, and explore on a minix lane, which
#                                   # boots the generic kernel flavour there
#                                   # (cmd/themis-nested; .ci/run runs this);
#                                   # each test is retried alone, and only on the
#                                   # emulated host's own crash (docs/kvm.md): no
#                                   # whole-job retry here or in .ci/run
#
# Both need the guest image (themisctl guest build); extra arguments go to
# go test (hardware) or cmd/themis-nested (--nested).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --nested ]; then
  shift
  exec go run ./cmd/themis-nested "$@"
fi
export THEMIS_REQUIRE_KVM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# go test's own status is checked below through the counts; keep its output.
set +e
go test -json -count=1 -timeout 30m -run '^TestKVMLinux' "$@" ./vmm/kvm/... >"$out"
status=$?
set -e
go run ./cmd/testcount -run '^TestKVMLinux' -min 11 <"$out"  # the suite, its 9 subtests, RestorePages
exit "$status"
