package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/themisfs/themis/client"
)

// rawCodec sends a request's bytes as they are, under the proto codec's
// name, so that a test can send bytes that are not a valid message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// writeToken writes a token file holding tok.
func writeToken(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTokenCheckedBeforeDecode checks that a request without the token is
// refused before its body is decoded: bytes that are no message still get
// Unauthenticated, not the decoder's error.
func TestTokenCheckedBeforeDecode(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	d, f := startFake(t, Config{Listen: "tcp://127.0.0.1:0", TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey}, TokenFile: writeToken(t, "s3cret")})
	c := dial(t, strings.TrimPrefix(d.Addr(), "tcp://"), client.Options{CAFile: pki.CA})
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f} // a truncated varint: no message
	var out []byte
	err := c.Conn().Invoke(t.Context(), "/themis.v1.Themis/ListSessions", garbage, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("garbage without a token: %v, want Unauthenticated", err)
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("the domain saw %q", calls)
	}
}

// TestMetricsToken checks that /metrics never takes the token in
// cleartext: on loopback it is plain HTTP without a token and refuses a
// request that sends one (before: 200, the token checked in cleartext);
// off loopback it is HTTPS and asks for the token, or for a client
// certificate with tls.client_ca.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	token := writeToken(t, "s3cret")
	plain, _ := startFake(t, Config{Listen: "unix://" + filepath.Join(sockDir(t), "themisd.sock"),
		MetricsListen: "127.0.0.1:0", UI: UIConfig{Listen: "127.0.0.1:0"}, TokenFile: token})
	// 0.0.0.0 is not loopback, so TLS; the test reaches it on 127.0.0.1.
	tlsTok, _ := startFake(t, Config{Listen: "unix://" + filepath.Join(sockDir(t), "themisd.sock"),
		MetricsListen: "0.0.0.0:0", UI: UIConfig{Listen: "0.0.0.0:0"}, TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey}, TokenFile: token})
	mtls, _ := startFake(t, Config{Listen: "tcp://127.0.0.1:0", MetricsListen: "0.0.0.0:0", UI: UIConfig{Listen: "0.0.0.0:0"},
		TLS: TLSConfig{Cert: pki.ServerCert, Key: pki.ServerKey, ClientCA: pki.CA}})
	for _, ep := range []struct {
		path string
		addr func(d *Daemon) string
	}{{"/metrics", (*Daemon).MetricsAddr}, {"/findings", (*Daemon).UIAddr}} {
		t.Run(ep.path, func(t *testing.T) {
			t.Parallel()
			httpEndpointAuth(t, pki, ep.path, func(d *Daemon) string { return loopbackPort(t, ep.addr(d)) }, plain, tlsTok, mtls)
		})
	}
}

// loopbackPort is 127.0.0.1 with addr's port.
func loopbackPort(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + p
}

// httpEndpointAuth checks one HTTP endpoint of three daemons (plain on
// loopback, TLS with a token, mTLS) against who may read it.
func httpEndpointAuth(t *testing.T, pki testPKI, path string, port func(d *Daemon) string, plain, tlsTok, mtls *Daemon) {
	withCert, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, url, auth string
		cert            bool
		want            int // 0: the request fails (TLS handshake)
	}{
		{"loopback without a token", "http://" + port(plain), "", false, http.StatusOK},
		{"loopback with the token", "http://" + port(plain), "Bearer s3cret", false, http.StatusBadRequest},
		{"loopback with a wrong token", "http://" + port(plain), "Bearer wrong", false, http.StatusBadRequest},
		{"tls without a token", "https://" + port(tlsTok), "", false, http.StatusUnauthorized},
		{"tls with a wrong token", "https://" + port(tlsTok), "Bearer wrong", false, http.StatusUnauthorized},
		{"tls basic auth", "https://" + port(tlsTok), "Basic czNjcmV0", false, http.StatusUnauthorized},
		{"tls with the token", "https://" + port(tlsTok), "Bearer s3cret", false, http.StatusOK},
		{"the token in cleartext to the tls port", "http://" + port(tlsTok), "Bearer s3cret", false, http.StatusBadRequest},
		{"mtls with a client certificate", "https://" + port(mtls), "", true, http.StatusOK},
		{"mtls without a client certificate", "https://" + port(mtls), "", false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tc, err := clientTLS(pki.CA)
			if err != nil {
				t.Fatal(err)
			}
			if tt.cert {
				tc.Certificates = []tls.Certificate{withCert}
			}
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
			defer hc.CloseIdleConnections()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, tt.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := hc.Do(req)
			if tt.want == 0 {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatalf("GET %s: %d, want the TLS handshake refused", tt.url, resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := resp.Body.Close(); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want {
				t.Errorf("GET %s with authorization %q: %d, want %d", tt.url, tt.auth, resp.StatusCode, tt.want)
			}
		})
	}
}

// clientTLS trusts the CA in caFile.
func clientTLS(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificates", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// TestRequestSizeLimit checks that a request past MaxRequestBytes is
// refused with ResourceExhausted before the domain sees it, and that one
// just under it gets through to the decoder.
func TestRequestSizeLimit(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, f := startFake(t, Config{Listen: "unix://" + sock})
	c := dial(t, d.Addr(), client.Options{})
	for _, tc := range []struct {
		name string
		size int
		want codes.Code
	}{
		{"over the limit", MaxRequestBytes + 1, codes.ResourceExhausted},
		// Field 15 (bytes) of ListSessionsRequest is unknown: decoded and skipped.
		{"under the limit", MaxRequestBytes - 16, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Calls())
			msg := unknownBytesField(tc.size)
			if len(msg) != tc.size {
				t.Fatalf("built %d bytes, want %d", len(msg), tc.size)
			}
			var out []byte
			err := c.Conn().Invoke(t.Context(), "/themis.v1.Themis/ListSessions", msg, &out, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != tc.want {
				t.Fatalf("a %d-byte request: %v, want %v", len(msg), err, tc.want)
			}
			if got := len(f.Calls()) - before; (tc.want == codes.OK) != (got == 1) {
				t.Errorf("the domain saw %d calls", got)
			}
		})
	}
}

// unknownBytesField is a message of n bytes (n >= 16): field 15, wire
// type 2, its length as a varint, then zeros.
func unknownBytesField(n int) []byte {
	varint := func(v int) []byte {
		var b []byte
		for ; v >= 0x80; v >>= 7 {
			b = append(b, byte(v)|0x80)
		}
		return append(b, byte(v))
	}
	payload := n - 1 - len(varint(n))
	b := append([]byte{15<<3 | 2}, varint(payload)...)
	return append(b, make([]byte, payload)...)
}
