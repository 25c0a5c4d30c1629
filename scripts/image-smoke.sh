#!/usr/bin/env bash
# image-smoke.sh OUT: run the image scripts/build-image.sh made in OUT with a
# real OCI runtime ($THEMIS_OCI_RUNTIME: runc by default, or crun; both from
# Debian) and check what comes out:
#
#   themisctl --json doctor                               every host tool found, backend qemu
#   themisctl --json sweep clock --fs ext2 --shard 0/4    rows of shard 0, each with a verdict
#   themisctl --json explore --fs ext2 --depth 1 --shard 0/2
#                                                         the shard's summary: unique states,
#                                                         its shard, its state keys
#
# The bundle is umoci unpack of OUT/oci, so what runs is the image as pushed
# (its ENTRYPOINT, ENV and files); config.json is then given the command, a
# writable root, and a /dev/shm of $THEMIS_SMOKE_SHM (default 1g: QEMU keeps
# each guest's RAM there, 128 MiB a guest, and the runtime's default is
# 64 MiB). No network (a network namespace with nothing in it), no /dev/kvm,
# default capabilities. Outputs stay in OUT/smoke/. Run as root.
#
# --compare-host then runs the same two shards here, outside any container,
# with the context's themisctl and guest image (OUT/context-dir names the
# context; the host needs scripts/install-deps.sh's packages, as CI's has),
# and checks that they agree:
# the explore shard's digest, unique states and state keys are equal, and the
# sweep's rows (lane, value, op, field) with the same kind of verdict (a row
# holding the wall clock, as a read's atime, differs in its value only).
#
# runc is the default because crun 1.8 (bookworm) refuses hosts with hybrid
# cgroups whose v2 hierarchy holds a controller ("cgroups in hybrid mode not
# supported"), as our CI machines do; runc 1.1 runs there.
set -euo pipefail
compare=false
if [ "${1:-}" = --compare-host ]; then
  compare=true
  shift
fi
if [ $# -ne 1 ]; then
  echo "usage: $0 [--compare-host] OUT (the directory scripts/build-image.sh made)" >&2
  exit 2
fi
out=$(cd "$1" && pwd)
shm=${THEMIS_SMOKE_SHM:-1g}
runtime=${THEMIS_OCI_RUNTIME:-runc}
for t in "$runtime" umoci jq timeout; do
  if ! command -v "$t" >/dev/null; then
    echo "$t not installed: apt-get install $t (or scripts/install-deps.sh --image)" >&2
    exit 1
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "$0 runs containers as root ($runtime, umoci unpack): run it as root" >&2
  exit 1
fi
[ -f "$out/oci/index.json" ] || { echo "$out/oci is no OCI layout: run scripts/build-image.sh $out" >&2; exit 1; }
tag=$(umoci ls --layout "$out/oci" | head -n 1)

bundle=$out/bundle
smoke=$out/smoke
rm -rf "$bundle" "$smoke"
mkdir -p "$smoke"
echo "== bundle: umoci unpack $out/oci:$tag"
umoci unpack --image "$out/oci:$tag" "$bundle" >/dev/null
base=$bundle/config.base.json
jq --arg shm "size=$shm" '
    .process.terminal = false
  | .root.readonly = false
  | .hostname = "themis-smoke"
  | .mounts |= map(if .destination == "/dev/shm"
      then .options = ((.options // []) | map(select(startswith("size=") | not)) + [$shm])
      else . end)
' "$bundle/config.json" >"$base"
jq -e '.linux.namespaces | any(.type == "network")' "$base" >/dev/null

ids=()
cleanup() {
  for id in "${ids[@]}"; do "$runtime" delete --force "$id" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# run NAME ARGS...: themisctl ARGS in the container, stdout to
# smoke/NAME.out, stderr to smoke/NAME.err; prints the wall time.
run() {
  local name=$1 id="themis-smoke-$1-$$" start rc ms
  shift
  jq --argjson args "$(printf '%s\n' themisctl "$@" | jq -R . | jq -s .)" '.process.args = $args' \
    "$base" >"$bundle/config.json"
  ids+=("$id")
  start=$(date +%s%N)
  set +e
  timeout 900 "$runtime" run --bundle "$bundle" "$id" >"$smoke/$name.out" 2>"$smoke/$name.err" </dev/null
  rc=$?
  set -e
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%s: exit %d, %d.%d s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000 / 100))
  if [ "$rc" -ne 0 ]; then
    echo "themisctl $* failed in the container (exit $rc); its stderr:" >&2
    tail -n 40 "$smoke/$name.err" >&2
    exit 1
  fi
}

# check FILE WHAT [JQ-OPTION...] FILTER: fail saying WHAT unless jq -e
# FILTER holds on FILE.
check() {
  if ! jq -e "${@:3}" "$1" >/dev/null; then
    echo "check failed: $2 ($1)" >&2
    head -c 2000 "$1" >&2
    exit 1
  fi
}

echo "== doctor"
run doctor --json doctor
check "$smoke/doctor.out" "a themis.v1.DoctorReport" '.schema == "themis.v1.DoctorReport"'
check "$smoke/doctor.out" "every host tool found" '.tools | length > 0 and all(.found)'
check "$smoke/doctor.out" "backend qemu (no /dev/kvm in the container)" '.backend == "qemu"'
jq -r '"tools: \(.tools | map(.name) | join(" ")); backend \(.backend); \(.qemu_version)"' "$smoke/doctor.out"

echo "== sweep clock --fs ext2 --shard 0/4"
run sweep --json sweep clock --fs ext2 --shard 0/4
# A themis.v1.SweepCell a line (docs/api.md; value and the other 64-bit
# fields are strings).
check "$smoke/sweep.out" "rows of lane ext2, each a SweepCell with a verdict" \
  --slurp 'length > 0 and all(.schema == "themis.v1.SweepCell" and .lane == "ext2" and (.verdict | type == "string" and length > 0))'
jq -rs '"\(length) rows: " + (group_by(.verdict | sub("\\(.*"; "")) | map("\(.[0].verdict | sub("\\(.*"; "")) \(length)") | join(", "))' "$smoke/sweep.out"

echo "== explore --fs ext2 --depth 1 --shard 0/2"
run explore --json explore --fs ext2 --depth 1 --shard 0/2
# An ExploreResult (docs/api.md): protojson, so 64-bit counts are strings
# and a zero (shard 0) is left out.
check "$smoke/explore.out" "explore summary: unique states, shard 0/2, its state keys" \
  '.schema == "themis.v1.ExploreResult" and (.summary | (.unique_states | tonumber) > 0 and (.shard_index // 0) == 0 and .shard_count == 2 and
   (.state_keys | length) == (.unique_states | tonumber) and (.digest | length) > 0 and .backend == "qemu")'
jq -r '.summary | "states \(.states), unique \(.unique_states), findings \(.findings // 0), shard \(.shard_index // 0)/\(.shard_count), \(.state_keys | length) state keys, digest \(.digest[:16])…, \(.elapsed_s * 10 | round / 10) s exploring, \(.workers) workers"' "$smoke/explore.out"

if $compare; then
  echo "== the same shards on this host (--compare-host)"
  ctx=$(cat "$out/context-dir")
  ctl=$ctx/root/usr/local/bin/themisctl
  [ -x "$ctl" ] || { echo "--compare-host: no $ctl (the context $out/context-dir names)" >&2; exit 1; }
  export THEMIS_GUEST_IMAGE=$ctx/root/usr/lib/themis/guest THEMIS_CACHE_DIR=$smoke/host-cache
  "$ctl" --embedded --json sweep clock --fs ext2 --shard 0/4 >"$smoke/host-sweep.out" 2>"$smoke/host-sweep.err"
  "$ctl" --embedded --json explore --fs ext2 --depth 1 --shard 0/2 >"$smoke/host-explore.out" 2>"$smoke/host-explore.err"
  rows='[.[] | {lane, value, op, field, verdict: (.verdict | sub("\\(.*"; ""))}] | sort'
  if ! cmp -s <(jq -cs "$rows" "$smoke/sweep.out") <(jq -cs "$rows" "$smoke/host-sweep.out"); then
    echo "the sweep shard's rows differ between the container and the host:" >&2
    diff <(jq -cs "$rows | .[]" "$smoke/sweep.out") <(jq -cs "$rows | .[]" "$smoke/host-sweep.out") >&2 || true
    exit 1
  fi
  search='.summary | {digest, unique_states, states, state_keys: (.state_keys | sort)}'
  if ! cmp -s <(jq -cS "$search" "$smoke/explore.out") <(jq -cS "$search" "$smoke/host-explore.out"); then
    echo "the explore shard differs between the container and the host:" >&2
    jq -c "$search | .state_keys |= length" "$smoke/explore.out" "$smoke/host-explore.out" >&2
    exit 1
  fi
  echo "host and container agree: $(jq -s length "$smoke/sweep.out") sweep rows, explore digest $(jq -r '.summary.digest[:16]' "$smoke/explore.out")…"
fi
echo "image smoke ok: outputs in $smoke"
