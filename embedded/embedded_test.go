package embedded_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/embedded"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/server"
)

// TestStartServesAndCleansUp: the embedded daemon answers on its private
// socket, and Shutdown removes the socket's directory.
func TestStartServesAndCleansUp(t *testing.T) {
	ctx := context.Background()
	d, err := embedded.Start(ctx, t.TempDir(), t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	sock, ok := strings.CutPrefix(d.Addr(), "unix://")
	if !ok {
		t.Fatalf("Addr %q: want a unix socket", d.Addr())
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("socket mode %v: want no access for group or others", perm)
	}
	c, err := client.Dial(ctx, d.Addr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{}); err != nil {
		t.Errorf("ListSessions: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Errorf("the socket's directory is still there after Shutdown: %v", err)
	}
}

// TestKilledCommandsDirSwept: the socket dir of a command that was killed
// (owned, its lock free) goes at the next embedded daemon's start; the
// live daemon's own stays until its Shutdown, and a dir of that prefix
// that no daemon owns is not touched.
func TestKilledCommandsDirSwept(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	killed := filepath.Join(tmp, server.EmbeddedDirPrefix+"123")
	foreign := filepath.Join(tmp, server.EmbeddedDirPrefix+"foreign")
	for _, dir := range []string{killed, foreign} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// The owner file, unlocked: what a SIGKILLed command leaves.
	if err := os.WriteFile(filepath.Join(killed, scratch.OwnerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed, "themisd.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := embedded.Start(context.Background(), t.TempDir(), t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Dir(strings.TrimPrefix(d.Addr(), "unix://"))
	for _, c := range []struct {
		dir  string
		want bool
	}{{killed, false}, {foreign, true}, {own, true}} {
		if _, err := os.Stat(c.dir); (err == nil) != c.want {
			t.Errorf("%s: there %v, want %v (%v)", c.dir, err == nil, c.want, err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Errorf("own socket dir after Shutdown: %v", err)
	}
}

// TestServe: Serve tells the address it listens on, serves until its
// context ends, and then returns without error; a config file that is
// not there is an error naming it.
func TestServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- embedded.Serve(ctx, embedded.ServeOptions{Listen: "unix://" + sock, StateDir: t.TempDir(), CacheDir: t.TempDir(),
			Listening: func(addr string) { heard <- addr }}, zap.NewNop())
	}()
	select {
	case addr := <-heard:
		if addr != "unix://"+sock {
			t.Errorf("listening on %q: want unix://%s", addr, sock)
		}
	case err := <-done:
		t.Fatalf("Serve returned before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not listen within 30 s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after its context ended: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not return within 60 s of its context's end")
	}

	missing := filepath.Join(t.TempDir(), "nope.toml")
	err := embedded.Serve(context.Background(), embedded.ServeOptions{ConfigFile: missing}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "nope.toml") {
		t.Errorf("Serve with a missing config file: %v, want an error naming it", err)
	}
}
