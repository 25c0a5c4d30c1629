package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExampleConfig(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(filepath.Join("..", "deploy", "themisd.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Listen:        "unix:///run/themis/themisd.sock",
		StateDir:      "/var/lib/themis",
		CacheDir:      "/var/cache/themis",
		MetricsListen: "127.0.0.1:9464",
		Limits:        Limits{MaxSessions: 4, MaxMemoryMiB: 2048, ManualCheckpoints: 12, AutoCheckpoints: 10, CallTimeoutS: 60, MaxRunSeconds: 3600, MaxBaseCacheMiB: 8192, SessionBudgetMiB: 2048, StreamStallS: 30, StreamBuffer: 256, MaxConnsPerPeer: 16},
		Ledger:        LedgerConfig{RetentionDays: 30},
	}
	if diff := cmp.Diff(want, cfg, cmp.AllowUnexported(Config{}, bounds{})); diff != "" {
		t.Errorf("example config mismatch (-want +got):\n%s", diff)
	}
	if _, err := cfg.validate(); err != nil {
		t.Errorf("example config does not validate: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, toml string
		want       Config
		wantErr    string
	}{
		{name: "empty", toml: ""},
		{name: "tcp", toml: "listen = \"tcp://0.0.0.0:7443\"\ntoken_file = \"/t\"\n[tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n",
			want: Config{Listen: "tcp://0.0.0.0:7443", TokenFile: "/t", TLS: TLSConfig{Cert: "c", Key: "k", ClientCA: "ca"}}},
		{name: "unknown top-level key", toml: "listen = \"unix:///x\"\nlisten_addr = \"y\"\n", wantErr: "line 2: unknown key listen_addr"},
		{name: "unknown nested key", toml: "[limits]\nmax_sesions = 3\n", wantErr: "unknown key limits.max_sesions"},
		{name: "unknown table", toml: "[auth]\ntoken = \"x\"\n", wantErr: "unknown key auth"},
		{name: "wrong type", toml: "[limits]\nmax_sessions = \"four\"\n", wantErr: "line 2"},
		{name: "syntax", toml: "listen = \n", wantErr: "line 1"},
	}
	for _, tt := range tests {
		got, err := ParseConfig([]byte(tt.toml))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want it to contain %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(Config{}, bounds{})); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestLoadConfigNamesFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "themisd.toml")
	if err := os.WriteFile(path, []byte("bogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "unknown key bogus") {
		t.Errorf("LoadConfig err = %v, want the path and the key", err)
	}
}

func TestParseListen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want listenAddr
		err  bool
	}{
		{in: "unix:///run/themis/themisd.sock", want: listenAddr{"unix", "/run/themis/themisd.sock"}},
		{in: "unix:/run/x.sock", want: listenAddr{"unix", "/run/x.sock"}},
		{in: "/run/x.sock", want: listenAddr{"unix", "/run/x.sock"}},
		{in: "tcp://127.0.0.1:7443", want: listenAddr{"tcp", "127.0.0.1:7443"}},
		{in: "tcp://[::1]:7443", want: listenAddr{"tcp", "[::1]:7443"}},
		{in: "tcp://host", err: true},
		{in: "unix://rel.sock", err: true},
		{in: "http://x:1", err: true},
		{in: "x:1", err: true},
	}
	for _, tt := range tests {
		got, err := parseListen(tt.in)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("parseListen(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "deploy", "themisd.example.toml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[limits]\nmax_sessions = 3\n"))
	f.Add([]byte("listen = \"tcp://h:1\"\n[tls]\ncert = \"c\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			return
		}
		_, _ = cfg.validate() // must not panic
	})
}
