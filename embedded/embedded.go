package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/server"
)

// Daemon is a daemon started in this process on a private socket.
type Daemon struct {
	d   *server.Daemon
	tmp *scratch.Dir // the socket's directory, removed by Shutdown
}

// Start starts a daemon that serves on a socket in a fresh temporary
// directory, with the guest image cache cacheDir and the ledger in
// stateDir ("" each: the default).
func Start(ctx context.Context, cacheDir, stateDir string, log *zap.Logger) (*Daemon, error) {
	// Owned: a command killed before Shutdown leaves it to the next
	// daemon's startup sweep.
	tmp, err := scratch.MkdirTemp(os.TempDir(), server.EmbeddedDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("embedded daemon: %w", err)
	}
	cfg := server.Config{Listen: "unix://" + filepath.Join(tmp.Path, "themisd.sock"), CacheDir: cacheDir, StateDir: stateDir}
	d, err := server.StartDaemon(ctx, cfg, log)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("embedded daemon: %w", err), tmp.Remove())
	}
	return &Daemon{d: d, tmp: tmp}, nil
}

// Addr is the address a client dials (unix://...).
func (d *Daemon) Addr() string { return d.d.Addr() }

// Shutdown stops the daemon and every guest it ran, and removes its
// socket's directory.
func (d *Daemon) Shutdown(ctx context.Context) error {
	return errors.Join(d.d.Shutdown(ctx), d.tmp.Remove())
}
