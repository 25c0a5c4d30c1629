package client

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in, target string
		unix, err  bool
	}{
		{in: "unix:///run/themis/themisd.sock", target: "unix:///run/themis/themisd.sock", unix: true},
		{in: "/run/themis/themisd.sock", target: "unix:///run/themis/themisd.sock", unix: true},
		{in: "unix:rel.sock", target: "unix:rel.sock", unix: true},
		{in: "themis.example.com:7443", target: "dns:///themis.example.com:7443"},
		{in: "tcp://10.0.0.5:7443", target: "dns:///10.0.0.5:7443"},
		{in: "unix://rel.sock", err: true},
		{in: "https://x:1", err: true},
		{in: "themis.example.com", err: true},
		{in: "", err: true},
	}
	for _, tt := range tests {
		target, unix, err := parseAddr(tt.in)
		if (err != nil) != tt.err || target != tt.target || unix != tt.unix {
			t.Errorf("parseAddr(%q) = %q, %v, %v; want %q, %v, err %v", tt.in, target, unix, err, tt.target, tt.unix, tt.err)
		}
	}
}

func TestDefaultSocket(t *testing.T) {
	t.Setenv(SocketEnv, "/tmp/x.sock")
	if got := DefaultSocket(); got != "/tmp/x.sock" {
		t.Errorf("DefaultSocket with $%s = %q", SocketEnv, got)
	}
	t.Setenv(SocketEnv, "unix:///tmp/y.sock")
	if got := DefaultAddr(); got != "unix:///tmp/y.sock" {
		t.Errorf("DefaultAddr with $%s as an address = %q", SocketEnv, got)
	}
	t.Setenv(SocketEnv, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	want := "/run/user/1000/themis/themisd.sock"
	if os.Geteuid() == 0 {
		want = "/run/themis/themisd.sock"
	}
	if got := DefaultSocket(); got != want {
		t.Errorf("DefaultSocket = %q, want %q", got, want)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if os.Geteuid() != 0 {
		want = filepath.Join(os.TempDir(), "themis-"+strconv.Itoa(os.Geteuid()), "themisd.sock")
	}
	if got := DefaultSocket(); got != want {
		t.Errorf("DefaultSocket without XDG_RUNTIME_DIR = %q, want %q", got, want)
	}
}

func TestDialRefuses(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		addr string
		opts Options
		want string
	}{
		{"insecure tcp", "localhost:7443", Options{Insecure: true}, "only on a unix socket"},
		{"cert without key", "localhost:7443", Options{CertFile: "/c.pem"}, "both CertFile and KeyFile"},
		{"missing ca", "localhost:7443", Options{CAFile: "/nonexistent/ca.pem"}, "ca file"},
		{"no daemon", "unix://" + filepath.Join(t.TempDir(), "none.sock"), Options{}, "none.sock"},
	}
	for _, tt := range tests {
		_, err := Dial(ctx, tt.addr, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Dial err = %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
}
