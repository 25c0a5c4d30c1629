package baseimage

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zeebo/blake3"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/hosttool"
)

// pinFunc rewrites, in the image file img of size bytes, what mkfs drew at
// random or from the clock.
type pinFunc func(ctx context.Context, img string, size int64) error

// pins is how one filesystem's base image is made reproducible besides
// mkfs's own options: an environment for mkfs (a frozen clock), a rewrite
// after it, and the identities of the tools they use, for the cache key.
type pins struct {
	env    []string
	after  pinFunc
	recipe []string
}

// faketimeLibs are where Debian's libfaketime puts the library that
// freezes a program's clock (LD_PRELOAD).
var faketimeLibs = []string{"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"}

// planPins returns the pins of spec's filesystem:
//   - btrfs: btrfs.Pin after mkfs (device, chunk tree and subvolume UUIDs,
//     times);
//   - xfs, udf, f2fs, minix, nilfs2: mkfs runs with its clock frozen at
//     FakeTime (libfaketime), the only thing they take from the host
//     besides their options and, for nilfs2, the UUID nilfs2.Pin writes
//     after;
//   - exfat: tune.exfat -I sets the volume serial mkfs.exfat took from the
//     clock (it rewrites the boot checksum too);
//   - ext*: mke2fs reads E2FSPROGS_FAKE_TIME (mkfsArgs); vfat: --invariant.
func planPins(ctx context.Context, spec guest.LaneSpec) (pins, error) {
	switch spec.FS {
	case "btrfs":
		return pins{after: func(_ context.Context, img string, size int64) error { return pinBtrfs(img, size) },
			recipe: []string{btrfsPinFormat}}, nil
	case "xfs", "udf", "f2fs", "minix", "nilfs2":
		lib, id, err := faketime()
		if err != nil {
			return pins{}, err
		}
		at := time.Unix(FakeTime, 0).UTC().Format("2006-01-02 15:04:05")
		p := pins{env: []string{"LD_PRELOAD=" + lib, "FAKETIME=" + at, "TZ=UTC"}, recipe: []string{"faketime " + at, id}}
		if spec.FS == "nilfs2" {
			p.after = func(_ context.Context, img string, size int64) error { return pinNilfs2(img, size) }
			p.recipe = append(p.recipe, nilfs2PinFormat)
		}
		return p, nil
	case "exfat":
		bin, err := hosttool.Look("tune.exfat")
		if err != nil {
			return pins{}, fmt.Errorf("baseimage: %w", err)
		}
		id, err := toolIdentity(ctx, spec.FS, bin)
		if err != nil {
			return pins{}, err
		}
		serial := "0x" + VolumeID
		return pins{after: func(ctx context.Context, img string, _ int64) error {
			_, err := hosttool.Run(ctx, "", bin, "-I", serial, img)
			return err
		}, recipe: []string{"tune.exfat -I " + serial, id}}, nil
	}
	return pins{}, nil
}

// faketime finds libfaketime and returns its path and identity (the
// library's hash).
func faketime() (lib, id string, err error) {
	for _, p := range faketimeLibs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		sum := blake3.Sum256(b)
		return p, "libfaketime=" + hex.EncodeToString(sum[:]), nil
	}
	return "", "", fmt.Errorf("baseimage: libfaketime not found (%s): install the Debian package %s", filepath.Base(faketimeLibs[0]), hosttool.Package("libfaketime"))
}

// CanMake reports whether this host has every tool Make needs for spec's
// image (a single layer: an overlay lane's is spec.Layer()), without
// making it.
func CanMake(ctx context.Context, spec guest.LaneSpec) error {
	_, err := planBase(ctx, spec)
	return err
}
