package sessiontest

import (
	"context"
	"testing"

	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// Real opens a Manager whose sessions boot the real guest (QEMU, the
// prebuilt image of vmmtest.Setup: the test skips in -short and fails under
// CI=true without one). cfg's StateDir, CacheDir and Log are filled in, and MakeBase where unset
// (baseimage.Make).
// When the test ends the Manager is closed and nothing it started may be
// left behind (vmmtest.Leaks).
func Real(t *testing.T, cfg session.Config) *session.Manager {
	t.Helper()
	env := vmmtest.Setup(t)
	check := vmmtest.Leaks(t)
	cfg.StateDir, cfg.CacheDir, cfg.Log = t.TempDir(), env.CacheDir, zaptest.NewLogger(t)
	if cfg.MakeBase == nil {
		cfg.MakeBase = baseimage.Make
	}
	m, err := session.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		check()
	})
	return m
}
