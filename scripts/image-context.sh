#!/usr/bin/env bash
# image-context.sh DIR: the build context of deploy/Containerfile, which
# scripts/build-image.sh uses too:
#
#   DIR/packages                         deploy/image/packages
#   DIR/root/usr/local/bin/themisctl     static (CGO_ENABLED=0) linux/amd64
#   DIR/root/usr/local/bin/themisd
#   DIR/root/usr/lib/themis/guest/       the guest image (vmlinuz,
#                                        initramfs.cpio, manifest.json) that
#                                        THEMIS_GUEST_IMAGE names in the image
#   DIR/root/usr/lib/themis/revision     git describe of the source
#   DIR/root/var/cache/themis/           THEMIS_CACHE_DIR, empty
#
# The guest image is `themisctl guest build` of this tree (cached in
# $THEMIS_CACHE_DIR as usual, so a second run takes seconds). It needs the Go
# toolchain and, on a cold cache, apt-get download of the kernel.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
mkdir -p "$1"
ctx=$(cd "$1" && pwd)
# DIR/root is replaced: refuse a directory that is something else.
if [ -n "$(ls -A "$ctx")" ] && [ ! -f "$ctx/packages" ]; then
  echo "$ctx is not empty and not a context made before (no packages file): give an empty or new DIR" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
repo=$(pwd)
if ! command -v go >/dev/null; then
  echo "go not found: the binaries and the guest image are built with the Go toolchain of go.mod" >&2
  exit 1
fi
if ! command -v ldd >/dev/null; then
  echo "ldd not found (it checks the binaries are static): apt-get install libc-bin" >&2
  exit 1
fi

root=$ctx/root
rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/usr/lib/themis/guest" "$root/var/cache/themis"
cp deploy/image/packages "$ctx/packages"

echo "== static themisctl, themisd"
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags='-s -w' \
  -o "$root/usr/local/bin/" ./cmd/themisctl ./cmd/themisd
for b in themisctl themisd; do
  # ldd exits non-zero ("not a dynamic executable") on a static binary.
  if ldd "$root/usr/local/bin/$b" >/dev/null 2>&1; then
    echo "$b is dynamically linked; the image's binaries must be static" >&2
    exit 1
  fi
done

echo "== guest image"
# The agent is built from this tree; the JSON (a themis.v1.CachedGuestImage)
# names the cached image's files.
img=$(THEMIS_SOURCE_DIR=$repo "$root/usr/local/bin/themisctl" guest build --json)
kernel=$(printf '%s\n' "$img" | sed -n 's/^ *"kernel": "\(.*\)",\{0,1\}$/\1/p')
dir=$(dirname "$kernel")
if [ -z "$kernel" ] || [ ! -f "$dir/manifest.json" ]; then
  echo "themisctl guest build --json named no image directory:" >&2
  printf '%s\n' "$img" >&2
  exit 1
fi
cp "$dir/vmlinuz" "$dir/initramfs.cpio" "$dir/manifest.json" "$root/usr/lib/themis/guest/"
git describe --always --dirty --abbrev=12 2>/dev/null >"$root/usr/lib/themis/revision" ||
  echo unknown >"$root/usr/lib/themis/revision"
echo "context in $ctx: guest image $(basename "$dir"), revision $(cat "$root/usr/lib/themis/revision")"
du -sh "$root/usr/local/bin" "$root/usr/lib/themis/guest"
