package inguest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

const lane = "l0"

// newServer returns a server over a temporary root with one lane directory.
func newServer(t *testing.T) (*Server, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, lane)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Server{Root: root, Log: zaptest.NewLogger(t), Version: "test"}, dir
}

// must runs req and fails the test unless it succeeds.
func must(t *testing.T, s *Server, req *agentv1.Request) *agentv1.Response {
	t.Helper()
	resp := s.Handle(req)
	if resp.GetErrno() != 0 || resp.GetError() != "" {
		t.Fatalf("%v: errno %d (%s)", req, resp.GetErrno(), resp.GetError())
	}
	return resp
}

func errnoOf(resp *agentv1.Response) syscall.Errno { return syscall.Errno(resp.GetErrno()) }

// Request builders.
func mkdir(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: lane, Path: p, Mode: 0o755}}}
}
func create(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Create{Create: &agentv1.Create{Lane: lane, Path: p, Mode: 0o644, Flags: unix.O_WRONLY}}}
}
func rmdir(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Rmdir{Rmdir: &agentv1.Rmdir{Lane: lane, Path: p}}}
}
func unlink(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Unlink{Unlink: &agentv1.Unlink{Lane: lane, Path: p}}}
}
func stat(p string, follow bool) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: lane, Path: p, Follow: follow}}}
}
func write(p string, flags uint32, off int64, data []byte, size int64, fill uint32) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Write{Write: &agentv1.Write{
		Lane: lane, Path: p, Flags: flags, Offset: off, Data: data, Size: size, Fill: fill}}}
}
func readReq(p string, off, n int64) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_ReadFile{ReadFile: &agentv1.ReadFile{Lane: lane, Path: p, Offset: off, Length: n}}}
}
func fp(mode agentv1.TimeMode, leaves bool) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, TimeMode: mode, Leaves: leaves}}}
}

// setup builds d/, d/f (3 bytes), e/ (empty), s -> d/f.
func setup(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"d", "e"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "d/f"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/f", filepath.Join(dir, "s")); err != nil {
		t.Fatal(err)
	}
}
