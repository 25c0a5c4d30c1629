package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestCreateSessionImageRefusedAlike: every image directory the daemon
// refuses (a host directory outside the cache, a missing path, a file, a
// directory in the cache that is not an image) gets the same code and the
// same message, which names neither the path asked for nor the cache: a
// client cannot probe the host's filesystem through CreateSessionRequest.image.
func TestCreateSessionImageRefusedAlike(t *testing.T) {
	cache := t.TempDir()
	images := filepath.Join(cache, "images")
	notImage := filepath.Join(images, "not-an-image")
	if err := os.MkdirAll(filepath.Join(notImage, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(images, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(hostFile, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, machines := sessiontest.NewManager(t, t.TempDir(), session.Config{CacheDir: cache}, nil)
	d, err := StartDaemonWith(t.Context(), Config{Listen: "unix://" + filepath.Join(sockDir(t), "themisd.sock"), StateDir: t.TempDir()}, NewDomain(m), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, d)
	c := dial(t, d.Addr(), client.Options{})
	tests := []struct {
		name, image string
	}{
		{"an existing host directory", "/etc"},
		{"the host's root", "/"},
		{"a missing host path", "/nonexistent-themis-probe/x"},
		{"a host file", hostFile},
		{"a missing path in the cache", filepath.Join(images, "missing")},
		{"a file in the cache", file},
		{"a directory in the cache, not an image", notImage},
		{"a directory nested in the cache", filepath.Join(notImage, "nested")},
		{"the image cache itself", images},
		{"a relative path", "."},
	}
	var first *status.Status
	for _, tt := range tests {
		_, err := c.CreateSession(t.Context(), &themisv1.CreateSessionRequest{Lanes: []string{"ext2"}, Image: tt.image})
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || badField(st) != "image" {
			t.Errorf("%s (%q): %v, field %q: want InvalidArgument naming image", tt.name, tt.image, err, badField(st))
			continue
		}
		for _, leak := range []string{cache, tt.image} {
			if leak != "." && strings.Contains(st.Message(), leak) {
				t.Errorf("%s: message %q names %q", tt.name, st.Message(), leak)
			}
		}
		if first == nil {
			first = st
		} else if st.Message() != first.Message() {
			t.Errorf("%s: message %q, want the same as for %s: %q", tt.name, st.Message(), tests[0].name, first.Message())
		}
	}
	if n := machines.Len(); n != 0 {
		t.Errorf("%d machines started for refused images", n)
	}
}
