package dashboard_test

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/internal/longtest"
	"github.com/themisfs/themis/report/reporttest"
	"github.com/themisfs/themis/server"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// daemon is a real themisd in this process with its dashboard on
// loopback.
type daemon struct {
	d  *server.Daemon
	c  *client.Client
	ui string // http://127.0.0.1:PORT
}

// startDaemon starts a daemon on state dir dir and dials it.
func startDaemon(ctx context.Context, t *testing.T, dir, cacheDir string) *daemon {
	t.Helper()
	d, err := server.StartDaemon(ctx, server.Config{
		Listen:   "unix://" + filepath.Join(dir, "themisd.sock"),
		StateDir: filepath.Join(dir, "state"),
		CacheDir: cacheDir,
		UI:       server.UIConfig{Listen: "127.0.0.1:0"},
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, d.Addr(), client.Options{})
	if err != nil {
		_ = d.Shutdown(ctx)
		t.Fatal(err)
	}
	return &daemon{d: d, c: c, ui: "http://" + d.UIAddr()}
}

// stop closes the client and shuts the daemon down.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	_ = d.c.Close()
	if err := d.d.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestDashboardRealGuest is issue 30's test of the dashboard: a real
// daemon runs an ext2,vfat explore with findings (depth 1, symlinks,
// --policy exact: vfat has none) and a crash run on ext2 with a crash
// finding (the stock ext2 fsync of a new file, docs/hunt.md); every
// page loads in Chromium with what they made (finding rows and kinds, the
// runs' pages with their kind, options and last progress, the download
// links); a finding's bundle and a crash image download; a status set
// through the form's POST is still shown by a new daemon on the same
// state dir.
func TestDashboardRealGuest(t *testing.T) {
	longtest.Need(t, "the dashboard against a daemon's real explore and crash runs, across a restart")
	env := vmmtest.Setup(t)
	chromium := reporttest.Chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t0 := time.Now()
	d := startDaemon(ctx, t, dir, env.CacheDir)
	explored, found := runExplore(ctx, t, d.c)
	crashed, crashFinding := runCrash(ctx, t, d.c)
	t.Logf("explore %s (%d findings), crash %s (finding %s): %s", explored, len(found), crashed, crashFinding, time.Since(t0).Round(time.Second))
	diverged := found[0]

	dom := func(path string, has ...string) {
		t.Helper()
		page := reporttest.DumpURL(t, chromium, d.ui+path)
		for _, s := range has {
			if !strings.Contains(page, s) {
				t.Errorf("%s in Chromium: no %q in\n%s", path, s, page)
			}
		}
	}
	dom("/findings", `<table id="findings">`, `<a href="/findings/`+diverged+`">`, `<a href="/findings/`+crashFinding+`">`, "<td>crash</td>", "ext2, vfat")
	dom("/findings?kind=crash&image=stock", "1 finding(s)", `<a href="/findings/`+crashFinding+`">`)
	dom("/findings/"+diverged, `<pre id="trace">`, `href="/findings/`+diverged+`/bundle.tar.gz"`, `<select name="status">`)
	dom("/findings/"+crashFinding, "Crash state", `href="/findings/`+crashFinding+`/crash.img"`, `href="/findings/`+crashFinding+`/bundle.tar.gz"`)
	dom("/sessions", `<a href="/sessions/`+explored+`">`, `<a href="/sessions/`+crashed+`">`)
	dom("/sessions/"+explored, `<td id="run-kind">explore</td>`, `"vfat"`, `<span id="live-state">ended</span>`, `href="/findings/`+diverged+`"`,
		`href="/sessions/`+explored+`/report.html"`)
	dom("/sessions/"+explored+"/report.html", `id="unique-by-depth"`, `data-id="`+diverged+`"`)
	dom("/sessions/"+crashed, `<td id="run-kind">crash</td>`, "fsync f", "crash state(s) checked", `href="/findings/`+crashFinding+`"`)
	checkEvents(t, d.ui, crashed)
	checkBundle(t, d.ui, diverged, "repro.sh")
	checkBundle(t, d.ui, crashFinding, "crash.img")

	setStatus(t, d.ui, crashFinding, "reported")
	d.stop(t)
	d = startDaemon(ctx, t, dir, env.CacheDir)
	defer d.stop(t)
	dom("/findings/"+crashFinding, `<td class="status-reported">reported`, `<option value="reported" selected="">`)
	dom("/findings?status=reported", `<a href="/findings/`+crashFinding+`">`) // and the others of its signature
	dom("/sessions/"+crashed, `<td id="run-kind">crash</td>`)                 // from the ledger now: no live feed survives the restart
	t.Logf("the whole test: %s", time.Since(t0).Round(time.Second))
}

// runExplore explores ext2,vfat at depth 1 (symlinks only, every
// difference a finding) and returns its session and its findings' IDs.
func runExplore(ctx context.Context, t *testing.T, c *client.Client) (string, []string) {
	t.Helper()
	stream, err := c.Explore(ctx, &themisv1.ExploreRequest{Lanes: []string{"ext2", "vfat"}, Depth: 1, Branching: 1, Workers: 1,
		Ops: []string{"symlink"}, Policy: "exact", Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var sess string
	var ids []string
	err = client.Drain(stream.Recv, func(m *themisv1.ExploreResponse) error {
		if f := m.GetFinding(); f != nil && !f.GetMinimized() {
			ids = append(ids, f.GetId())
		}
		if s := m.GetSummary(); s != nil {
			sess = s.GetSessionId()
		}
		return nil
	})
	if err != nil || sess == "" || len(ids) == 0 {
		t.Fatalf("explore ext2,vfat: %v, session %q, findings %q: want findings", err, sess, ids)
	}
	return sess, ids
}

// runCrash checks the crash states of a new file's fsync on ext2 and
// returns its session and its (first) crash finding's ID.
func runCrash(ctx context.Context, t *testing.T, c *client.Client) (string, string) {
	t.Helper()
	stream, err := c.Crash(ctx, &themisv1.CrashRequest{Lanes: []string{"ext2"}, Trace: []string{"create f 0644", "fsync f"},
		CrashWrites: -1, MaxStates: 8, Minimize: -1})
	if err != nil {
		t.Fatal(err)
	}
	var sess, id string
	err = client.Drain(stream.Recv, func(m *themisv1.CrashResponse) error {
		if f := m.GetFinding(); f != nil && id == "" {
			id = f.GetId()
		}
		if s := m.GetSummary(); s != nil {
			sess = s.GetSessionId()
		}
		return nil
	})
	if err != nil || sess == "" || id == "" {
		t.Fatalf("crash ext2: %v, session %q, finding %q: want a crash finding (the stock ext2 fsync of a new file)", err, sess, id)
	}
	return sess, id
}

// checkEvents reads an ended run's event stream: its last update, done,
// then the end.
func checkEvents(t *testing.T, ui, sess string) {
	t.Helper()
	resp, err := http.Get(ui + "/sessions/" + sess + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil || resp.Header.Get("Content-Type") != "text/event-stream" ||
		!strings.Contains(string(b), `"kind":"crash"`) || !strings.Contains(string(b), `"done":true`) || !strings.HasSuffix(string(b), "event: end\ndata: {}\n\n") {
		t.Errorf("events of %s: %v %v\n%s", sess, err, resp.Header, b)
	}
}

// checkBundle downloads a finding's bundle (as a link on its page does)
// and looks for the file want in it.
func checkBundle(t *testing.T, ui, id, want string) {
	t.Helper()
	t0 := time.Now()
	req, _ := http.NewRequest(http.MethodGet, ui+"/findings/"+id+"/bundle.tar.gz", nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("bundle of %s: %s\n%s", id, resp.Status, b)
	}
	gz, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("bundle of %s: %v", id, err)
		}
		names = append(names, h.Name)
	}
	if !strings.Contains(strings.Join(names, " "), id+"/"+want) {
		t.Errorf("bundle of %s: %q, want %s in it", id, names, want)
	}
	t.Logf("bundle of %s: %q in %s", id, names, time.Since(t0).Round(time.Millisecond))
}

// setStatus posts the finding page's form, from that page's origin.
func setStatus(t *testing.T, ui, id, status string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ui+"/findings/"+id+"/status", strings.NewReader(url.Values{"status": {status}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", ui)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status form of %s: %s, want 303", id, resp.Status)
	}
}
