#!/usr/bin/env bash
# Installs the Debian packages Themis needs on the host (run as root).
# qemu-system-x86, qemu-utils: the QEMU backend; e2fsprogs, dosfstools,
# btrfs-progs, xfsprogs, exfatprogs, udftools, f2fs-tools, nilfs-tools: base images, e2fsck,
# debugfs, btrfs check, xfs_repair, fsck.exfat, fsck.f2fs (mkfs.minix and
# fsck.minix are util-linux's); libfaketime: the frozen clock the xfs
# and udf base images are made under;
# protobuf-compiler, libprotobuf-dev (google/protobuf/*.proto): scripts/gen-proto.sh;
# chromium: the report tests load the HTML page in headless Chromium;
# libxml2-utils (xmllint): the JUnit report's schema check.
# The guest kernel is fetched by `themisctl guest build` with apt-get download;
# linux-source-6.1 and the headers of both flavours' current kernels
# (linux-headers-<version>[-cloud]-amd64) are what `guest build --patch` builds a
# filesystem's module from (docs/fs-under-test.md).
# --image adds what scripts/build-image.sh and scripts/image-smoke.sh use:
# mmdebstrap, umoci, runc, jq (docs/image.md).
set -euo pipefail
pkgs=(qemu-system-x86 qemu-utils e2fsprogs dosfstools btrfs-progs xfsprogs exfatprogs udftools f2fs-tools nilfs-tools libfaketime protobuf-compiler libprotobuf-dev ca-certificates chromium libxml2-utils linux-source-6.1)
case "${1:-}" in
  "") ;;
  --image) pkgs+=(mmdebstrap umoci runc jq) ;;
  *) echo "usage: $0 [--image]" >&2; exit 2 ;;
esac
# The headers of the kernels guest build boots: what each flavour's metapackage depends on
# in the package lists as they are now (the metapackage itself when they cannot say).
headers() {
  for flavour in cloud-amd64 amd64; do
    img=$(apt-cache depends "linux-image-$flavour" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1 || true)
    if [ -n "$img" ]; then echo "${img/linux-image-/linux-headers-}"; else echo "linux-headers-$flavour"; fi
  done
}
missing_of() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
# apt-get download of the kernel needs fresh package lists even when nothing is missing;
# lists older than the mirror name headers of a kernel the mirror no longer has, so the
# headers are named again after an update.
updated=false
if [ ! -d /var/lib/apt/lists ] || [ -z "$(ls /var/lib/apt/lists/*Packages* 2>/dev/null)" ] || [ "${CI:-}" = true ]; then
  apt-get update -q
  updated=true
fi
mapfile -t missing < <(missing_of "${pkgs[@]}" $(headers))
if [ "${#missing[@]}" -gt 0 ] && [ "$updated" = false ]; then
  apt-get update -q
  mapfile -t missing < <(missing_of "${pkgs[@]}" $(headers))
fi
if [ "${#missing[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
