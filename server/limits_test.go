package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// TestMetricsNeedToken checks that with token_file set, /metrics asks for
// the same bearer token as the API.
func TestMetricsNeedToken(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(sockDir(t), "themisd.sock")
	d, _ := startFake(t, Config{Listen: "unix://" + sock, MetricsListen: "127.0.0.1:0", TokenFile: writeToken(t, "s3cret")})
	get := func(auth string) int {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+d.MetricsAddr()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := resp.Body.Close(); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	defer http.DefaultClient.CloseIdleConnections()
	for _, tt := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"Basic czNjcmV0", http.StatusUnauthorized},
		{"Bearer s3cret", http.StatusOK},
	} {
		if got := get(tt.auth); got != tt.want {
			t.Errorf("GET /metrics with authorization %q: %d, want %d", tt.auth, got, tt.want)
		}
	}
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
