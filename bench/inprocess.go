package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm"
)

// RunInProcess is Run on session managers of its own, one per agent
// channel, each on a temporary state directory removed after, with the
// guest image cache cacheDir: `themisctl bench explore` measures the
// engine in this process, with no daemon between.
func RunInProcess(ctx context.Context, cacheDir string, log *zap.Logger, o Options) (rep *Report, err error) {
	state, err := os.MkdirTemp("", "themis-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var opened []*session.Manager
	defer func() {
		for _, m := range opened {
			err = errors.Join(err, m.Close())
		}
		if rerr := os.RemoveAll(state); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: %w", rerr))
		}
	}()
	managers := func(ctx context.Context, ch vmm.AgentChannel) (*session.Manager, error) {
		m, err := session.Open(ctx, session.Config{MakeBase: baseimage.Make, StateDir: filepath.Join(state, "state-"+string(ch)),
			CacheDir: cacheDir, Guest: guest.Options{CacheDir: cacheDir, Log: log}, AgentChannel: ch, Log: log})
		if err == nil {
			opened = append(opened, m)
		}
		return m, err
	}
	return Run(ctx, managers, o)
}
