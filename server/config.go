package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/session"
)

// MaxConfigSize caps a config file, in bytes.
const MaxConfigSize = 1 << 20

// Config is the daemon's configuration (TOML; see deploy/themisd.example.toml).
// Zero values mean the documented defaults.
type Config struct {
	// Listen is "unix:///path" (default: client.DefaultSocket) or
	// "tcp://host:port". TCP needs TLS.Cert and TLS.Key and, for client
	// authentication, TLS.ClientCA (mTLS) or TokenFile, or both.
	Listen string `toml:"listen"`
	// StateDir holds the session ledger. Default: /var/lib/themis for root,
	// else $XDG_STATE_HOME/themis (~/.local/state/themis).
	StateDir string `toml:"state_dir"`
	// CacheDir holds guest images and base images. Default: the guest
	// package's default ($THEMIS_CACHE_DIR or the user cache dir).
	CacheDir string `toml:"cache_dir"`
	// MetricsListen is a host:port for the Prometheus endpoint (/metrics),
	// e.g. "127.0.0.1:9464". Empty: no metrics endpoint. On a loopback
	// address (127.0.0.0/8, ::1, localhost) it is plain HTTP and needs no
	// token (one sent is refused); on any other it is HTTPS with TLS.Cert
	// and TLS.Key, and asks for TLS.ClientCA's certificates and/or the
	// token, one of which must be set.
	MetricsListen string `toml:"metrics_listen"`
	// UI configures the dashboard.
	UI UIConfig `toml:"ui"`
	// TLS configures the TCP listener.
	TLS TLSConfig `toml:"tls"`
	// TokenFile holds a bearer token; when set, every call (except health)
	// must send "authorization: Bearer <token>". The token is the file's
	// content without surrounding white space.
	TokenFile string `toml:"token_file"`
	// Limits bound what the daemon hands out.
	Limits Limits `toml:"limits"`
	// Ledger configures the session ledger's upkeep.
	Ledger LedgerConfig `toml:"ledger"`

	// bounds shortens the connection bounds in tests (zero: the defaults).
	bounds bounds
}

// DefaultRetentionDays is LedgerConfig.RetentionDays when unset.
const DefaultRetentionDays = 30

// LedgerConfig configures the session ledger (StateDir/ledger.db).
type LedgerConfig struct {
	// RetentionDays is how long, in days, the ledger keeps events and the
	// records of sessions that ended or failed; older ones are pruned when
	// the daemon starts and every hour. Findings are kept. 0: the default
	// (DefaultRetentionDays).
	RetentionDays int `toml:"retention_days"`
}

// UIConfig configures the dashboard (package dashboard): the findings
// across runs and their status, the sessions.
type UIConfig struct {
	// Listen is a host:port for it, e.g. "127.0.0.1:8080". Empty: no
	// dashboard. The same rules as MetricsListen: plain HTTP on a loopback
	// address, else HTTPS with TLS.Cert and TLS.Key and TLS.ClientCA's
	// certificates and/or the token.
	Listen string `toml:"listen"`
}

// TLSConfig names PEM files.
type TLSConfig struct {
	// Cert and Key are the server certificate (chain) and private key.
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// ClientCA, when set, turns on mTLS: clients must present a certificate
	// signed by one of these CAs.
	ClientCA string `toml:"client_ca"`
}

// Limits are daemon-wide limits; 0 means the session package's default.
type Limits struct {
	// MaxSessions is the most sessions running at once.
	MaxSessions int `toml:"max_sessions"`
	// MaxMemoryMiB is the most guest RAM of all running sessions together, in MiB.
	MaxMemoryMiB int `toml:"max_memory_mib"`
	// ManualCheckpoints is the size of each session's manual checkpoint pool.
	ManualCheckpoints int `toml:"manual_checkpoints"`
	// AutoCheckpoints is the size of each session's auto checkpoint ring.
	AutoCheckpoints int `toml:"auto_checkpoints"`
	// CallTimeoutS caps each guest call of an RPC, in seconds (the
	// caller's deadline, or this when later; default 60, at most 3600):
	// past it the session is marked unresponsive.
	CallTimeoutS int `toml:"call_timeout_s"`
	// MaxRunSeconds caps every run (explore, sweep, profile, corrupt), in
	// seconds; past it the run is cancelled (default 3600).
	MaxRunSeconds int `toml:"max_run_seconds"`
	// MaxBaseCacheMiB bounds the disk the cached base images take, in MiB
	// (baseimage.Maker; default 8192): the least recently used go first.
	MaxBaseCacheMiB int `toml:"max_base_cache_mib"`
	// SessionBudgetMiB bounds the host memory one session keeps beyond its
	// guest RAM, in MiB: the sectors its overlays hold, the file content
	// kept for RestoreFile, its checkpoints' RAM copies. A guest write past
	// it fails the session with RESOURCE_EXHAUSTED naming what ran out; a
	// fork past it is refused (default 2048, at most the daemon budget).
	SessionBudgetMiB int `toml:"session_budget_mib"`
	// DaemonBudgetMiB bounds the same over all sessions together, in MiB
	// (default: half the host's memory, at least 256).
	DaemonBudgetMiB int `toml:"daemon_budget_mib"`
	// StreamStallS is how long, in seconds, a run waits for room in its
	// stream's full buffer (StreamBuffer messages) before it is
	// cancelled: a client that does not read its stream (default 30,
	// DefaultStreamWait).
	StreamStallS int `toml:"stream_stall_s"`
	// StreamBuffer is how many messages (findings, cells, rows, image
	// chunks of up to 128 KiB; progress is coalesced) a run may queue ahead
	// of a client that does not read its stream (default
	// DefaultStreamBuffer, at most MaxStreamBuffer).
	StreamBuffer int `toml:"stream_buffer"`
	// MaxConnsPerPeer is the most TCP connections one peer (an IPv4
	// address, an IPv6 /64) holds at once, counted before the TLS handshake;
	// one more is closed at once (default DefaultConnsPerPeer, at most
	// MaxConnections).
	MaxConnsPerPeer int `toml:"max_conns_per_peer"`
}

// LoadConfig reads and strictly decodes a TOML config file: an unknown key
// or a value of the wrong type is an error naming the key and its line.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig strictly decodes TOML config bytes (see LoadConfig). It does
// not apply defaults.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	if len(data) > MaxConfigSize {
		return cfg, fmt.Errorf("config larger than %d bytes", MaxConfigSize)
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, tomlError(err)
	}
	return cfg, nil
}

// tomlError rewrites go-toml's errors as "line L: unknown key a.b" lines.
func tomlError(err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		msgs := make([]string, 0, len(strict.Errors))
		for _, e := range strict.Errors {
			row, _ := e.Position()
			msgs = append(msgs, fmt.Sprintf("line %d: unknown key %s", row, strings.Join(e.Key(), ".")))
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		if k := de.Key(); len(k) > 0 {
			return fmt.Errorf("line %d: %s: %s", row, strings.Join(k, "."), de.Error())
		}
		return fmt.Errorf("line %d: %s", row, de.Error())
	}
	return fmt.Errorf("config: %w", err)
}

// withDefaults returns c with empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "unix://" + client.DefaultSocket()
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir()
	}
	if c.Ledger.RetentionDays == 0 {
		c.Ledger.RetentionDays = DefaultRetentionDays
	}
	if c.Limits.MaxConnsPerPeer == 0 {
		c.Limits.MaxConnsPerPeer = DefaultConnsPerPeer
	}
	c.bounds = c.bounds.withDefaults()
	return c
}

func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/themis"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "themis")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "themis")
	}
	return filepath.Join(os.TempDir(), "themis-state")
}

// listenAddr is a parsed Config.Listen.
type listenAddr struct {
	network string // "unix" or "tcp"
	address string // socket path or host:port
}

func parseListen(s string) (listenAddr, error) {
	switch {
	case strings.HasPrefix(s, "unix://"):
		p := strings.TrimPrefix(s, "unix://")
		if !filepath.IsAbs(p) {
			return listenAddr{}, fmt.Errorf("listen: %q: socket path must be absolute (unix:///path)", s)
		}
		return listenAddr{"unix", filepath.Clean(p)}, nil
	case strings.HasPrefix(s, "unix:"):
		return parseListen("unix://" + strings.TrimPrefix(s, "unix:"))
	case filepath.IsAbs(s):
		return listenAddr{"unix", filepath.Clean(s)}, nil
	case strings.HasPrefix(s, "tcp://"):
		hp := strings.TrimPrefix(s, "tcp://")
		if _, port, ok := strings.Cut(hp, ":"); !ok || port == "" {
			return listenAddr{}, fmt.Errorf("listen: %q: want tcp://host:port", s)
		}
		return listenAddr{"tcp", hp}, nil
	default:
		return listenAddr{}, fmt.Errorf("listen: %q: want unix:///path or tcp://host:port", s)
	}
}

// validate checks what can be checked without touching the system.
func (c Config) validate() (listenAddr, error) {
	la, err := parseListen(c.Listen)
	if err != nil {
		return la, err
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return la, errors.New("tls: set both cert and key")
	}
	if c.TLS.ClientCA != "" && c.TLS.Cert == "" {
		return la, errors.New("tls.client_ca: needs tls.cert and tls.key")
	}
	if la.network == "tcp" {
		if c.TLS.Cert == "" {
			return la, fmt.Errorf("listen %s: TCP needs TLS: set tls.cert and tls.key (and tls.client_ca or token_file)", c.Listen)
		}
		if c.TLS.ClientCA == "" && c.TokenFile == "" {
			return la, fmt.Errorf("listen %s: TCP needs client authentication: set tls.client_ca (mTLS) or token_file", c.Listen)
		}
	}
	for _, l := range []struct {
		name string
		v    int
	}{
		{"limits.max_sessions", c.Limits.MaxSessions},
		{"limits.max_memory_mib", c.Limits.MaxMemoryMiB},
		{"limits.manual_checkpoints", c.Limits.ManualCheckpoints},
		{"limits.auto_checkpoints", c.Limits.AutoCheckpoints},
		{"limits.call_timeout_s", c.Limits.CallTimeoutS},
		{"limits.max_run_seconds", c.Limits.MaxRunSeconds},
		{"limits.max_base_cache_mib", c.Limits.MaxBaseCacheMiB},
		{session.SessionBudgetKey, c.Limits.SessionBudgetMiB},
		{session.DaemonBudgetKey, c.Limits.DaemonBudgetMiB},
		{"limits.stream_stall_s", c.Limits.StreamStallS},
		{"limits.stream_buffer", c.Limits.StreamBuffer},
		{"limits.max_conns_per_peer", c.Limits.MaxConnsPerPeer},
		{"ledger.retention_days", c.Ledger.RetentionDays},
	} {
		if l.v < 0 {
			return la, fmt.Errorf("%s: must not be negative, got %d", l.name, l.v)
		}
	}
	if c.Limits.StreamBuffer > MaxStreamBuffer {
		return la, fmt.Errorf("limits.stream_buffer: at most %d messages, got %d", MaxStreamBuffer, c.Limits.StreamBuffer)
	}
	if c.Limits.MaxConnsPerPeer > MaxConnections {
		return la, fmt.Errorf("limits.max_conns_per_peer: at most %d (all connections), got %d", MaxConnections, c.Limits.MaxConnsPerPeer)
	}
	return la, errors.Join(c.validateHTTP("metrics_listen", c.MetricsListen), c.validateHTTP("ui.listen", c.UI.Listen))
}

// validateHTTP refuses an HTTP endpoint (/metrics, the dashboard) that
// would take the token, or serve without one, in cleartext off the host:
// off loopback it needs TLS and client authentication (see
// Config.MetricsListen).
func (c Config) validateHTTP(key, addr string) error {
	if addr == "" || metricsOnLoopback(addr) {
		return nil
	}
	if c.TLS.Cert == "" {
		return fmt.Errorf("%s %s: not a loopback address, so served over TLS: set tls.cert and tls.key (and tls.client_ca or token_file), or listen on 127.0.0.1", key, addr)
	}
	if c.TLS.ClientCA == "" && c.TokenFile == "" {
		return fmt.Errorf("%s %s: not a loopback address, so it needs client authentication: set tls.client_ca (mTLS) or token_file", key, addr)
	}
	return nil
}

// metricsOnLoopback says whether host:port names a loopback address: a
// loopback IP or "localhost". An empty host (every interface), another
// name or a malformed address is not.
func metricsOnLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
