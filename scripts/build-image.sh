#!/usr/bin/env bash
# build-image.sh [--context DIR] OUT: the image of deploy/Containerfile,
# built without docker or podman from Debian's mirror (what CI can reach):
#
#   OUT/context/       scripts/image-context.sh's build context (unless
#                      --context names one already made)
#   OUT/rootfs.tar     the root filesystem: mmdebstrap --variant=minbase of
#                      the Containerfile's suite with deploy/image/packages,
#                      the slim image's dpkg excludes, then the context's root/
#   OUT/oci/           an OCI image layout holding it as one layer, tagged
#                      as $THEMIS_IMAGE is (default "latest"), with the Containerfile's LABEL, ENV, WORKDIR
#                      and ENTRYPOINT (umoci)
#   OUT/themis-oci.tar OUT/oci as an oci-archive: podman load -i, skopeo copy
#                      oci-archive:..., docker load (Docker 25 or later)
#
# $THEMIS_IMAGE names the image in the archive (default
# ghcr.io/themisfs/themis:latest, what deploy/k8s names); $THEMIS_IMAGE_MIRROR
# is the Debian mirror (default: mmdebstrap's, deb.debian.org with updates and
# security). scripts/image-smoke.sh OUT runs shards inside it. docs/image.md.
set -euo pipefail
usage() {
  echo "usage: $0 [--context DIR] OUT" >&2
  exit 2
}
ctx=
while [ $# -gt 0 ]; do
  case $1 in
    --context) [ $# -ge 2 ] || usage; ctx=$2; shift 2 ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
mkdir -p "$1"
out=$(cd "$1" && pwd)
if [ -n "$ctx" ]; then
  ctx=$(cd "$ctx" && pwd)
fi
# OUT's entries are replaced: refuse a directory that holds anything else.
for e in "$out"/* "$out"/.[!.]*; do
  [ -e "$e" ] || continue
  case ${e##*/} in
    context | context-dir | rootfs.tar | rootfs.tar.tmp | oci | themis-oci.tar | themis-oci.tar.tmp | bundle | smoke) ;;
    *) echo "$out holds $e, which this script did not make: give an empty or new OUT" >&2; exit 1 ;;
  esac
done
cd "$(dirname "$0")/.."
image=${THEMIS_IMAGE:-ghcr.io/themisfs/themis:latest}
tag=latest
case ${image##*/} in *:*) tag=${image##*:} ;; esac

for t in mmdebstrap umoci jq; do
  if ! command -v "$t" >/dev/null; then
    echo "$t not installed: apt-get install $t (or scripts/install-deps.sh --image)" >&2
    exit 1
  fi
done

# The Containerfile is the recipe; this reads the part of it it can follow.
cf=deploy/Containerfile
suite=$(sed -n 's/^FROM debian:\([a-z]*\)-slim$/\1/p' "$cf")
if [ -z "$suite" ] || [ "$(grep -c '^FROM ' "$cf")" -ne 1 ]; then
  echo "$cf: want one FROM debian:SUITE-slim" >&2
  exit 1
fi
entrypoint=$(sed -n 's/^ENTRYPOINT //p' "$cf")
workdir=$(sed -n 's/^WORKDIR //p' "$cf")
config=(--config.workingdir "${workdir:-/}"
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
while IFS= read -r kv; do config+=(--config.env "$kv"); done < <(sed -n 's/^ENV \([A-Za-z_][A-Za-z0-9_]*=.*\)$/\1/p' "$cf")
while IFS= read -r kv; do config+=(--config.label "$kv"); done < <(sed -n 's/^LABEL \([a-z][a-z0-9.-]*=.*\)$/\1/p' "$cf")
if ! args=$(printf '%s' "$entrypoint" | jq -er 'if type == "array" and length > 0 then .[] else error("not an exec-form array") end'); then
  echo "$cf: ENTRYPOINT must be a JSON array, got: $entrypoint" >&2
  exit 1
fi
while IFS= read -r a; do config+=(--config.entrypoint "$a"); done <<<"$args"

if [ -z "$ctx" ]; then
  ctx=$out/context
  scripts/image-context.sh "$ctx"
fi
echo "$ctx" >"$out/context-dir"  # for image-smoke.sh --compare-host
for f in "$ctx/packages" "$ctx/root/usr/local/bin/themisctl" "$ctx/root/usr/lib/themis/guest/manifest.json"; do
  [ -e "$f" ] || { echo "context $ctx lacks $f: make it with scripts/image-context.sh" >&2; exit 1; }
done
include=$(sed 's/#.*//' "$ctx/packages" | tr -s ' \t\n' ',' | sed 's/^,//; s/,$//')

echo "== root filesystem: mmdebstrap $suite minbase + $include"
start=$(date +%s)
mirror=()
[ -z "${THEMIS_IMAGE_MIRROR:-}" ] || mirror=("$THEMIS_IMAGE_MIRROR")
# merged-usr: /usr merged by symlinks and usr-is-merged, as Debian's own
# images, rather than the usrmerge package (which pulls in perl). The dpkg
# excludes are those of Debian's -slim images (debuerreotype).
mmdebstrap --variant=minbase --include="$include" --format=tar \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --aptopt='Acquire::Languages "none"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="sync-in $ctx/root /" \
  "$suite" "$out/rootfs.tar.tmp" "${mirror[@]}" </dev/null
mv "$out/rootfs.tar.tmp" "$out/rootfs.tar"
echo "rootfs: $(( $(date +%s) - start )) s, $(du -m "$out/rootfs.tar" | cut -f1) MiB"

echo "== OCI image layout (umoci)"
start=$(date +%s)
rm -rf "$out/oci" "$out/themis-oci.tar"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$tag"
umoci raw add-layer --image "$out/oci:$tag" "$out/rootfs.tar"
umoci config --image "$out/oci:$tag" --os linux --architecture amd64 \
  --author "scripts/build-image.sh" "${config[@]}"
umoci gc --layout "$out/oci"
# docker load takes the name from io.containerd.image.name, podman and
# skopeo the tag from org.opencontainers.image.ref.name.
jq --arg name "$image" '.manifests |= map(.annotations["io.containerd.image.name"] = $name)' \
  "$out/oci/index.json" >"$out/oci/index.json.tmp"
mv "$out/oci/index.json.tmp" "$out/oci/index.json"
tar -C "$out/oci" -cf "$out/themis-oci.tar.tmp" .
mv "$out/themis-oci.tar.tmp" "$out/themis-oci.tar"
echo "oci: $(( $(date +%s) - start )) s, $(du -m "$out/themis-oci.tar" | cut -f1) MiB ($image)"
