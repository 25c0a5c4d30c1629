package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/vmm/qemu"
)

const (
	// leftoverGrace is how old an unlocked RAM file or work dir under a
	// staging name (scratch.StagingPrefix) must be before the startup
	// sweep removes it: longer than the instant between creating one and
	// locking it. One under its name goes as soon as its lock is free (a
	// daemon SIGKILLed a second ago left it).
	leftoverGrace = 5 * time.Minute
	// baseTempAge is how old a base cache temporary must be before the
	// startup sweep removes it: those carry no lock, and a make (mkfs, a
	// seed tree written with debugfs) takes seconds to a few minutes.
	baseTempAge = 30 * time.Minute
)

// EmbeddedDirPrefix starts the name of the dir, in the temp dir, that holds
// the socket of a daemon a command runs in its own process (package
// embedded). It is owned (scratch.MkdirTemp): the startup sweep removes
// one whose command was killed.
const EmbeddedDirPrefix = "themisctl-"

// sweepLeftovers removes what a previous daemon left on the host: guest RAM
// files, machine work dirs and embedded daemons' socket dirs in the
// scratch dir and the temp dir whose
// owner process is gone (scratch.Sweep: their flock is free; safe with
// another daemon on the host), and base cache temporaries older than
// baseTempAge. It logs what it removed; a failure is logged, not returned
// (a leftover must not stop the daemon from starting).
func sweepLeftovers(cacheDir string, log *zap.Logger) {
	if cacheDir == "" {
		d, err := guest.DefaultCacheDir()
		if err != nil {
			log.Warn("sweep: no cache dir", zap.Error(err))
		}
		cacheDir = d
	}
	var removed []string
	var errs []error
	dirs := []string{qemu.ScratchDir()}
	if tmp := os.TempDir(); filepath.Clean(tmp) != filepath.Clean(dirs[0]) {
		dirs = append(dirs, tmp)
	}
	for _, dir := range dirs {
		r, err := scratch.Sweep(dir, qemu.RAMFilePrefix, leftoverGrace, log, qemu.WorkDirPrefix, EmbeddedDirPrefix)
		removed, errs = append(removed, r...), append(errs, err)
	}
	if cacheDir != "" {
		r, err := scratch.SweepAged(baseimage.BasesDir(cacheDir), baseimage.TempPrefixes, baseTempAge, log)
		removed, errs = append(removed, r...), append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("sweep: some leftovers stay", zap.Error(fmt.Errorf("sweep: %w", err)))
	}
	if len(removed) > 0 {
		log.Info("swept leftovers of a previous daemon", zap.Int("count", len(removed)))
	}
}
