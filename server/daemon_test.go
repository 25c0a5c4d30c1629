package server

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sockDir is a short temp dir: socket paths are limited to 107 bytes.
func sockDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "thd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startFake starts a daemon over a fakeDomain and shuts it down at cleanup.
func startFake(t *testing.T, cfg Config) (*Daemon, *fakeDomain) {
	t.Helper()
	f := &fakeDomain{}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	d, err := startDaemon(t.Context(), cfg, zaptest.NewLogger(t), fakeOpen(f))
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, d)
	return d, f
}

func fakeOpen(f *fakeDomain) openFunc {
	return func(_ context.Context, _ Config, onRestore func(time.Duration), _ *zap.Logger) (managedDomain, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.onRestore = onRestore
		return f, nil
	}
}

func dial(t *testing.T, addr string, opts client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestDaemonUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(sockDir(t), "run", "themisd.sock")
	d, f := startFake(t, Config{Listen: "unix://" + sock})
	if got, want := d.Addr(), "unix://"+sock; got != want {
		t.Errorf("Addr() = %q, want %q", got, want)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(sock))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("created socket dir mode = %v, want 0700", di.Mode().Perm())
	}
	entries, err := os.ReadDir(filepath.Dir(sock))
	if err != nil || len(entries) != 1 {
		t.Errorf("socket dir holds %v (%v), want only the socket", entries, err)
	}

	c := dial(t, d.Addr(), client.Options{})
	// Bad input first (the fake must see no call), then the daemon still serves.
	checkBadInputs(t, c, f)
	resp, err := c.ListSessions(t.Context(), &themisv1.ListSessionsRequest{})
	if err != nil || len(resp.GetSessions()) != 1 || resp.GetSessions()[0].GetId() != "s-1" {
		t.Fatalf("ListSessions after bad input = %v, %v", resp, err)
	}
	checkHealthAndReflection(t, c.Conn())
}

func TestDaemonStaleSocket(t *testing.T) {
	t.Parallel()
	dir := sockDir(t)

	// A socket nobody listens on is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	d, _ := startFake(t, Config{Listen: "unix://" + stale})
	dial(t, d.Addr(), client.Options{})

	// A socket a daemon answers on is not.
	_, err = startDaemon(t.Context(), Config{Listen: "unix://" + stale, StateDir: t.TempDir()}, zaptest.NewLogger(t), fakeOpen(&fakeDomain{}))
	if err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("second daemon on a live socket: err = %v, want another daemon", err)
	}
	dial(t, d.Addr(), client.Options{}) // the first still serves

	// Nor is anything that is not a socket.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = startDaemon(t.Context(), Config{Listen: "unix://" + file, StateDir: t.TempDir()}, zaptest.NewLogger(t), fakeOpen(&fakeDomain{}))
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("daemon on a regular file: err = %v, want not a socket", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("regular file after refused start = %q, %v", b, err)
	}
}

func TestDaemonRefusesBadConfig(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"tcp without tls", Config{Listen: "tcp://127.0.0.1:0", TokenFile: token}, "TCP needs TLS"},
		{"tcp tls without client auth", Config{Listen: "tcp://127.0.0.1:0", TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey}}, "client authentication"},
		{"cert without key", Config{Listen: "tcp://127.0.0.1:0", TLS: TLSConfig{Cert: pki.ServerCert}, TokenFile: token}, "both cert and key"},
		{"missing cert file", Config{Listen: "tcp://127.0.0.1:0", TLS: TLSConfig{Cert: "/nonexistent.pem", Key: pki.ServerKey}, TokenFile: token}, "nonexistent.pem"},
		{"bad client ca", Config{Listen: "tcp://127.0.0.1:0", TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey, ClientCA: token}}, "no PEM"},
		{"empty token", Config{Listen: "tcp://127.0.0.1:0", TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey}, TokenFile: empty}, "token_file"},
		{"bare host:port", Config{Listen: "127.0.0.1:0"}, "want unix:///path or tcp://host:port"},
		{"relative socket", Config{Listen: "unix://run/x.sock"}, "absolute"},
		{"negative limit", Config{Listen: "unix:///tmp/x.sock", Limits: Limits{MaxSessions: -1}}, "limits.max_sessions"},
		{"metrics off loopback without tls", Config{Listen: "unix:///tmp/x.sock", MetricsListen: "0.0.0.0:9464", TokenFile: token}, "metrics_listen"},
		{"metrics on every interface without tls", Config{Listen: "unix:///tmp/x.sock", MetricsListen: ":9464"}, "metrics_listen"},
		{"metrics off loopback without client auth", Config{Listen: "unix:///tmp/x.sock", MetricsListen: "192.0.2.1:9464", TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey}}, "metrics_listen"},
		{"dashboard off loopback without tls", Config{Listen: "unix:///tmp/x.sock", UI: UIConfig{Listen: "0.0.0.0:8080"}, TokenFile: token}, "ui.listen"},
		{"dashboard off loopback without client auth", Config{Listen: "unix:///tmp/x.sock", UI: UIConfig{Listen: "192.0.2.1:8080"}, TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey}}, "ui.listen"},
		{"per-peer cap past the global one", Config{Listen: "unix:///tmp/x.sock", Limits: Limits{MaxConnsPerPeer: MaxConnections + 1}}, "limits.max_conns_per_peer"},
	}
	for _, tt := range tests {
		opened := false
		open := func(context.Context, Config, func(time.Duration), *zap.Logger) (managedDomain, error) {
			opened = true
			return &fakeDomain{}, nil
		}
		tt.cfg.StateDir = t.TempDir()
		_, err := startDaemon(t.Context(), tt.cfg, zaptest.NewLogger(t), open)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tt.name, err, tt.want)
		}
		if opened {
			t.Errorf("%s: the domain was opened before the config was refused", tt.name)
		}
	}
}

func TestDaemonOpenFailureCleansUp(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(sockDir(t), "themisd.sock")
	open := func(context.Context, Config, func(time.Duration), *zap.Logger) (managedDomain, error) {
		return nil, errors.New("ledger locked")
	}
	_, err := startDaemon(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir()}, zaptest.NewLogger(t), open)
	if err == nil || !strings.Contains(err.Error(), "ledger locked") {
		t.Fatalf("err = %v, want ledger locked", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left behind after a failed start: %v", err)
	}
}

func TestDaemonTLSToken(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, _ := startFake(t, Config{
		Listen:    "tcp://127.0.0.1:0",
		TLS:       TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey},
		TokenFile: token,
	})
	addr := strings.TrimPrefix(d.Addr(), "tcp://")
	ctx := t.Context()

	// Health needs no token (probes), the API does.
	for _, tok := range []string{"", "wrong", "s3cret-and-more"} {
		c := dial(t, addr, client.Options{CAFile: pki.CA, Token: tok})
		_, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("token %q: ListSessions err = %v, want Unauthenticated", tok, err)
		}
	}
	c := dial(t, addr, client.Options{CAFile: pki.CA, Token: "s3cret"})
	if _, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{}); err != nil {
		t.Errorf("ListSessions with token: %v", err)
	}

	// The client refuses to send a token, or anything, without TLS.
	if _, err := client.Dial(ctx, addr, client.Options{Insecure: true, Token: "s3cret"}); err == nil {
		t.Error("Dial over TCP with Insecure succeeded")
	}
	// An unknown CA fails the handshake.
	if _, err := client.Dial(ctx, addr, client.Options{CAFile: newTestPKI(t).CA}); err == nil {
		t.Error("Dial with the wrong CA succeeded")
	}
}

func TestDaemonMTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	d, _ := startFake(t, Config{
		Listen: "tcp://127.0.0.1:0",
		TLS:    TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey, ClientCA: pki.CA},
	})
	addr := strings.TrimPrefix(d.Addr(), "tcp://")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if _, err := client.Dial(ctx, addr, client.Options{CAFile: pki.CA}); err == nil {
		t.Error("Dial without a client certificate succeeded")
	}
	other := newTestPKI(t)
	if _, err := client.Dial(ctx, addr, client.Options{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}); err == nil {
		t.Error("Dial with a client certificate from another CA succeeded")
	}
	c := dial(t, addr, client.Options{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey, ServerName: "localhost"})
	if _, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{}); err != nil {
		t.Errorf("ListSessions with a client certificate: %v", err)
	}
}

func TestDaemonGracefulShutdown(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		sock := filepath.Join(sockDir(t), "themisd.sock")
		f := &fakeDomain{block: make(chan struct{}), entered: make(chan struct{})}
		d, err := startDaemon(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir()}, zaptest.NewLogger(t), fakeOpen(f))
		if err != nil {
			t.Fatal(err)
		}
		c := dial(t, d.Addr(), client.Options{})
		applied := make(chan error, 1)
		go func() {
			_, err := c.Apply(context.Background(), &themisv1.ApplyRequest{SessionId: "s-1", Op: &themisv1.Op{Op: &themisv1.Op_Sync{Sync: &agentv1.Sync{}}}})
			applied <- err
		}()
		<-f.entered

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if force {
			ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		}
		shut := make(chan error, 1)
		go func() { shut <- d.Shutdown(ctx) }()
		if force {
			// The in-flight call is cut off when ctx ends.
			if err := <-shut; err != nil {
				t.Errorf("forced Shutdown: %v", err)
			}
			if err := <-applied; err == nil {
				t.Error("forced Shutdown: in-flight Apply succeeded")
			}
		} else {
			// The in-flight call finishes once the domain lets it.
			close(f.block)
			if err := <-applied; err != nil {
				t.Errorf("graceful Shutdown: in-flight Apply: %v", err)
			}
			if err := <-shut; err != nil {
				t.Errorf("graceful Shutdown: %v", err)
			}
		}
		cancel()
		if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("force=%v: socket left after Shutdown: %v", force, err)
		}
		if f.closed != 1 {
			t.Errorf("force=%v: domain closed %d times, want 1", force, f.closed)
		}
	}
}

// TestDaemonShutdownLeaks is not parallel, so no other test's goroutines run
// while it checks for leaks.
func TestDaemonShutdownLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	sock := filepath.Join(sockDir(t), "themisd.sock")
	f := &fakeDomain{}
	d, err := startDaemon(t.Context(), Config{Listen: "unix://" + sock, StateDir: t.TempDir(), MetricsListen: "127.0.0.1:0"}, zaptest.NewLogger(t), fakeOpen(f))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(t.Context(), d.Addr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSessions(t.Context(), &themisv1.ListSessionsRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	default:
		t.Error("Done not closed after Shutdown")
	}
	if d.Err() != nil {
		t.Errorf("Err() after Shutdown = %v, want nil", d.Err())
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left after Shutdown: %v", err)
	}
	if f.closed != 1 {
		t.Errorf("domain closed %d times, want 1", f.closed)
	}
	goleak.VerifyNone(t, ignore)
}

func TestDaemonMetrics(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, _ := startFake(t, Config{Listen: "unix://" + sock, MetricsListen: "127.0.0.1:0"})
	c := dial(t, d.Addr(), client.Options{})
	ctx := t.Context()
	if _, err := c.Apply(ctx, &themisv1.ApplyRequest{SessionId: "s-1", Op: &themisv1.Op{Op: &themisv1.Op_Mkdir{Mkdir: &agentv1.Mkdir{Path: "d"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restore(ctx, &themisv1.RestoreRequest{SessionId: "s-1", Checkpoint: "c-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(ctx, &themisv1.GetSessionRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.MetricsAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`themis_sessions_running 1`,
		`themis_ops_total{op="mkdir"} 1`,
		`themis_restores_total 1`,
		`themis_restore_seconds_count 1`,
		`themis_grpc_requests_total{code="OK",method="/themis.v1.Themis/Apply"} 1`,
		`themis_grpc_requests_total{code="InvalidArgument",method="/themis.v1.Themis/GetSession"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestGrpcurl checks that grpcurl works against the daemon over the unix
// socket with reflection only (no proto files). It needs grpcurl on PATH
// (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4).
func TestGrpcurl(t *testing.T) {
	t.Parallel()
	grpcurl, err := exec.LookPath("grpcurl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("grpcurl not on PATH; .ci/run installs it (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4)")
		}
		t.Skip("grpcurl not on PATH (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4)")
	}
	sock := filepath.Join(sockDir(t), "themisd.sock")
	startFake(t, Config{Listen: "unix://" + sock})
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, grpcurl, append([]string{"-plaintext", "-unix"}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := run(sock, "list")
	if err != nil || !strings.Contains(out, "themis.v1.Themis\n") || !strings.Contains(out, "grpc.health.v1.Health\n") {
		t.Errorf("grpcurl list = %q, %v", out, err)
	}
	out, err = run("-d", `{"all": true}`, sock, "themis.v1.Themis/ListSessions")
	if err != nil || !strings.Contains(out, `"id": "s-1"`) || !strings.Contains(out, `"STATE_FAILED"`) {
		t.Errorf("grpcurl ListSessions = %q, %v", out, err)
	}
	out, err = run("-d", `{}`, sock, "themis.v1.Themis/GetSession")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "session_id: required") {
		t.Errorf("grpcurl GetSession without id = %q, %v; want InvalidArgument naming session_id", out, err)
	}
	out, err = run("-d", `{"lanes": ["exfat"], "budget_seconds": 90}`, sock, "themis.v1.Themis/Check")
	if err != nil || !strings.Contains(out, `"f-d"`) || !strings.Contains(out, `"summary"`) || !strings.Contains(out, "lane exfat has no host checker") {
		t.Errorf("grpcurl Check = %q, %v; want the parts streamed, a finding and the summary", out, err)
	}
	out, err = run("-d", `{"finding_id": "f-1", "image": "bug-x"}`, sock, "themis.v1.Themis/Replay")
	if err != nil || !strings.Contains(out, `"reproduced": true`) || !strings.Contains(out, `"vfat=1"`) || !strings.Contains(out, `"image": "bug-x"`) {
		t.Errorf("grpcurl Replay = %q, %v; want the steps' errnos and reproduced", out, err)
	}
	out, err = run("-d", `{}`, sock, "themis.v1.Themis/Replay")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "finding_id: required") {
		t.Errorf("grpcurl Replay without id = %q, %v; want InvalidArgument naming finding_id", out, err)
	}
	out, err = run("-d", `{"finding_id": "f-1", "images": ["a", "b"]}`, sock, "themis.v1.Themis/Bisect")
	if err != nil || !strings.Contains(out, `"firstDifferingImage": "b"`) || !strings.Contains(out, `"kernelVersion": "6.1.1"`) {
		t.Errorf("grpcurl Bisect = %q, %v; want the rows and the first image that differs", out, err)
	}
	out, err = run("-d", `{"finding_id": "f-1"}`, sock, "themis.v1.Themis/Export")
	if err != nil || !strings.Contains(out, `"name": "repro.sh"`) || !strings.Contains(out, `"executable": true`) || !strings.Contains(out, `"stockKernel": "6.1.0"`) {
		t.Errorf("grpcurl Export = %q, %v; want the files streamed and the summary", out, err)
	}
	out, err = run("-d", `{"finding_id": "f-1", "status": "reported"}`, sock, "themis.v1.Themis/SetFindingStatus")
	if err != nil || !strings.Contains(out, `"status": "reported"`) || !strings.Contains(out, `"statusTime"`) {
		t.Errorf("grpcurl SetFindingStatus = %q, %v; want the finding, reported", out, err)
	}
	out, err = run("-d", `{"finding_id": "f-1", "status": "fixed"}`, sock, "themis.v1.Themis/SetFindingStatus")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "status: ") {
		t.Errorf("grpcurl SetFindingStatus fixed = %q, %v; want InvalidArgument naming status", out, err)
	}
	shard := `{"request": {"lanes": ["ext2"], "depth": 1, "shard_count": 1}, "summary": {"shard_count": 1, "states": "3", "state_keys": ["AA==", "AQ=="]}}`
	out, err = run("-d", `{"shards": [`+shard+`]}`, sock, "themis.v1.Themis/MergeExplore")
	if err != nil || !strings.Contains(out, `"uniqueStates": "2"`) || !strings.Contains(out, `"digest": "`) {
		t.Errorf("grpcurl MergeExplore = %q, %v; want the merged states and digest", out, err)
	}
	out, err = run("-d", `{"shards": [`+shard+`, `+shard+`]}`, sock, "themis.v1.Themis/MergeExplore")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "shards[1]: shards[0] and shards[1] are both shard 0") {
		t.Errorf("grpcurl MergeExplore of one shard twice = %q, %v; want InvalidArgument naming shards[1]", out, err)
	}
	out, err = run(sock, "grpc.health.v1.Health/Check")
	if err != nil || !strings.Contains(out, healthpb.HealthCheckResponse_SERVING.String()) {
		t.Errorf("grpcurl health = %q, %v", out, err)
	}
}

// shutdownAtEnd shuts d down when the test ends, within 10 s.
func shutdownAtEnd(t *testing.T, d *Daemon) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
}
