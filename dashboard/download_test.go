package dashboard

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// fetch GETs path with the headers hdr and returns the status, the
// headers and the body (err: the body was cut off).
func fetch(t *testing.T, srv *httptest.Server, path string, hdr map[string]string) (int, http.Header, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// untar reads a .tar.gz: its files' names, modes and bytes.
func untar(t *testing.T, b []byte) (map[string][]byte, map[string]int64) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files, modes := map[string][]byte{}, map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], modes[h.Name] = data, h.Mode
	}
}

// TestDownloads: a finding's bundle is what the export sent, as a tar.gz
// under the finding's ID (a crash finding's image whole, zeros written
// back); a crash finding's image downloads alone, its size said first; a
// download another site starts, a crash image of another finding, an
// unknown finding and an export that fails are refused with a status.
func TestDownloads(t *testing.T) {
	srv := httptest.NewServer(Handler(newStore(), nil, zap.NewNop()))
	defer srv.Close()
	want := func() []byte {
		b := make([]byte, 16384)
		copy(b[4096:], "abc")
		b[8192] = 'd'
		return b
	}()

	code, hdr, body, err := fetch(t, srv, "/findings/f-1/bundle.tar.gz", map[string]string{"Sec-Fetch-Site": "same-origin"})
	if err != nil || code != 200 || hdr.Get("Content-Type") != "application/gzip" || !strings.Contains(hdr.Get("Content-Disposition"), `filename="f-1.tar.gz"`) {
		t.Fatalf("bundle of f-1: %d %v %v", code, hdr, err)
	}
	files, modes := untar(t, body)
	if len(files) != 3 || string(files["f-1/repro.sh"]) != "repro.sh of f-1" || modes["f-1/repro.sh"] != 0o755 || modes["f-1/README"] != 0o644 {
		t.Errorf("bundle of f-1: %q %v", files, modes)
	}
	code, _, body, err = fetch(t, srv, "/findings/f-3/bundle.tar.gz", nil)
	if err != nil || code != 200 {
		t.Fatalf("bundle of f-3: %d %v", code, err)
	}
	if files, _ = untar(t, body); len(files) != 4 || !bytes.Equal(files["f-3/crash.img"], want) || string(files["f-3/check.sh"]) != "check.sh of f-3" {
		t.Errorf("bundle of f-3: %d files, crash.img of %d bytes", len(files), len(files["f-3/crash.img"]))
	}
	code, hdr, body, err = fetch(t, srv, "/findings/f-3/crash.img", nil)
	if err != nil || code != 200 || hdr.Get("Content-Length") != "16384" || !bytes.Equal(body, want) || !strings.Contains(hdr.Get("Content-Disposition"), `filename="f-3-crash.img"`) {
		t.Errorf("crash.img of f-3: %d %v %d bytes %v", code, hdr, len(body), err)
	}
	for _, tt := range []struct {
		name, path string
		hdr        map[string]string
		code       int
	}{
		{"another site", "/findings/f-3/crash.img", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"not a crash finding", "/findings/f-1/crash.img", nil, http.StatusNotFound},
		{"an unknown finding", "/findings/f-nope/bundle.tar.gz", nil, http.StatusNotFound},
		{"an export that fails", "/findings/f-2/bundle.tar.gz", nil, http.StatusBadRequest},
	} {
		if code, _, _, _ := fetch(t, srv, tt.path, tt.hdr); code != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, code, tt.code)
		}
	}
	_, body0 := get(t, srv, "/findings/f-3")
	_, body1 := get(t, srv, "/findings/f-1")
	if !strings.Contains(body0, `href="/findings/f-3/crash.img"`) || !strings.Contains(body0, `href="/findings/f-3/bundle.tar.gz"`) ||
		strings.Contains(body1, "crash.img") || !strings.Contains(body1, `href="/findings/f-1/bundle.tar.gz"`) {
		t.Error("the finding pages do not link their downloads")
	}
}

// TestSparse: chunks out of order or past the size are refused.
func TestSparse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		chunks [][2]int64 // offset, length
		ok     bool
	}{
		{"ascending", [][2]int64{{0, 2}, {4, 2}, {8, 0}}, true},
		{"back", [][2]int64{{4, 2}, {2, 1}}, false},
		{"overlap", [][2]int64{{0, 4}, {2, 1}}, false},
		{"past the end", [][2]int64{{6, 4}}, false},
	} {
		var buf bytes.Buffer
		s := &sparse{w: &buf, size: 8}
		var err error
		for _, c := range tt.chunks {
			if err = s.chunk(c[0], make([]byte, c[1])); err != nil {
				break
			}
		}
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestCloseEndsDownloads: Close cancels an export under way and returns
// once it has; a download after it is refused.
func TestCloseEndsDownloads(t *testing.T) {
	st := newStore()
	st.entered = make(chan struct{})
	d := Handler(st, nil, zap.NewNop())
	srv := httptest.NewServer(d)
	defer srv.Close()
	codes := make(chan int, 1)
	go func() {
		code, _, _, _ := fetch(t, srv, "/findings/f-1/bundle.tar.gz", nil)
		codes <- code
	}()
	<-st.entered
	d.Close()
	if code := <-codes; code != http.StatusInternalServerError {
		t.Errorf("the download Close cancelled: %d, want 500", code)
	}
	if code, _, _, _ := fetch(t, srv, "/findings/f-1/bundle.tar.gz", nil); code != http.StatusServiceUnavailable {
		t.Errorf("a download after Close: %d, want 503", code)
	}
	d.Close()
}
