package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/report/reporttest"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/runs/export"
	"github.com/themisfs/themis/session"
)

// hostile is what a guest could name a path or put in a report.
const hostile = `<script>alert("x")</script>&"'`

// fakeStore holds findings and sessions in memory, pages them as the
// ledger does (oldest first, after a key) and keeps statuses.
type fakeStore struct {
	mu       sync.Mutex
	findings []session.Finding
	sessions []*session.Info
	events   []session.Event
	// entered, when set, makes Export say it began and wait for its ctx.
	entered chan struct{}
}

func (s *fakeStore) FindingsPage(_ context.Context, sessionID string, after session.PageKey, limit int) ([]session.Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []session.Finding
	for _, f := range s.findings {
		if (sessionID == "" || f.Session == sessionID) && (session.PageKey{Created: f.Created, ID: f.ID}).After(after) && len(out) < limit {
			out = append(out, f)
		}
	}
	return out, nil
}

// RunPage: s-1 ran an explore whose page names its finding, f-1.
func (s *fakeStore) RunPage(_ context.Context, id string) (*runreport.Run, error) {
	if id != "s-1" {
		return nil, fmt.Errorf("explore run of %s: %w", id, errkind.ErrNotFound)
	}
	return &runreport.Run{Title: "explore ext2 " + hostile, Figures: [][2]string{{"states", "12"}}, UniqueByDepth: []int64{1, 3},
		Findings: []runreport.Finding{{ID: "f-1", Kind: "state-divergence", Detail: hostile, Trace: []string{"mkdir " + hostile + " 0755"}}}}, nil
}

func (s *fakeStore) Finding(_ context.Context, id string) (*session.Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.findings {
		if s.findings[i].ID == id {
			f := s.findings[i]
			return &f, nil
		}
	}
	return nil, fmt.Errorf("finding %q: %w", id, errkind.ErrNotFound)
}

func (s *fakeStore) SetFindingStatus(ctx context.Context, id, status string) (*session.Finding, error) {
	if err := session.ValidateFindingStatus(id, status); err != nil {
		return nil, err
	}
	s.mu.Lock()
	for i := range s.findings {
		if s.findings[i].ID == id {
			s.findings[i].Seen.Status, s.findings[i].Seen.StatusTime = status, time.Now()
		}
	}
	s.mu.Unlock()
	return s.Finding(ctx, id)
}

func (s *fakeStore) ListPage(_ context.Context, _ bool, after session.PageKey, limit int) ([]*session.Info, error) {
	var out []*session.Info
	for _, i := range s.sessions {
		if (session.PageKey{Created: i.Created, ID: i.ID}).After(after) && len(out) < limit {
			out = append(out, i)
		}
	}
	return out, nil
}

func (s *fakeStore) Get(_ context.Context, id string) (*session.Info, error) {
	for _, i := range s.sessions {
		if i.ID == id {
			c := *i
			return &c, nil
		}
	}
	return nil, fmt.Errorf("session %q: %w", id, errkind.ErrNotFound)
}

func (s *fakeStore) Events(_ context.Context, id string, after int64, limit int) ([]session.Event, error) {
	var out []session.Event
	for _, e := range s.events {
		if e.Session == id && e.Seq > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

// Export sends what runs/export sends: a crash finding's image first
// (ascending chunks, zeros left out, an empty chunk at its end), then the
// files; f-2's export fails before anything is sent.
func (s *fakeStore) Export(ctx context.Context, f *session.Finding, _ export.Options, out export.Sinks) (*export.Summary, error) {
	if f.ID == "f-2" {
		return nil, fmt.Errorf("replay %s: %w", f.ID, errkind.ErrState)
	}
	if s.entered != nil {
		s.entered <- struct{}{}
		<-ctx.Done()
		return nil, fmt.Errorf("replay %s: %w", f.ID, ctx.Err())
	}
	files := []string{"README", "repro.c", "repro.sh"}
	if f.Kind == session.KindCrash {
		files = []string{"README", "check.sh", "trace.txt"}
		for _, c := range []struct {
			off  int64
			data string
		}{{4096, "abc"}, {8192, "d"}, {16384, ""}} {
			if err := out.Image(c.off, []byte(c.data), 16384); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range files {
		if err := out.File(n, strings.HasSuffix(n, ".sh"), []byte(n+" of "+f.ID)); err != nil {
			return nil, err
		}
	}
	return &export.Summary{Finding: f.ID, Kind: f.Kind, Files: files}, nil
}

func newStore() *fakeStore {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	seen := session.Seen{Times: 2, FirstID: "f-1", First: t0, Last: t0.Add(time.Hour), Status: "new"}
	return &fakeStore{
		findings: []session.Finding{
			{ID: "f-1", Session: "s-1", Kind: "state-divergence", Detail: "lane ext4: " + hostile, Signature: "state-divergence|0|mkdir|nlink",
				LaneSpecs: []string{"ext2", "ext4"}, Path: hostile, Field: "nlink", Trace: []string{"mkdir " + hostile + " 0755"}, Created: t0, Seen: seen,
				Image: &guest.Ref{Key: "k", KernelVersion: "6.1.0-57-cloud-amd64", Flavor: "cloud"}},
			{ID: "f-2", Session: "s-2", Kind: "kernel", Detail: "BUG", Signature: "kernel|x", LaneSpecs: []string{"ext4:inode_size=128"},
				Trace: []string{"write f 0 1 0x55"}, Created: t0.Add(time.Minute), Seen: session.Seen{Times: 1, FirstID: "f-2", First: t0, Last: t0, Status: "reported"},
				Image:  &guest.Ref{Key: "0123456789abcdef", KernelVersion: "6.1.0-57-cloud-amd64", Flavor: "cloud", Patches: []guest.Input{{Name: "mine.patch", BLAKE3: "ab"}}},
				Kernel: &kreport.Report{Title: "kernel BUG at " + hostile, RIP: "ext4_mb_new_inode_pa+0x1", Trace: []string{"ext4_mb_new_blocks"}}},
			{ID: "f-3", Session: "s-2", Kind: "crash", Detail: "lost", Signature: "crash lost exfat after fsync of a file", LaneSpecs: []string{"exfat"},
				Created: t0.Add(2 * time.Minute), Crash: &session.CrashPoint{Lane: "exfat", Verdict: "clean", Durability: "LOST f: missing", Keep: []int{1, 2}, Writes: 5}},
		},
		sessions: []*session.Info{
			{ID: "s-1", State: "ENDED", Lanes: []session.Lane{{Name: "ext2", Spec: "ext2", FS: "ext2"}}, Backend: "qemu", Created: t0, Reason: hostile},
			{ID: "s-2", State: "ENDED", Lanes: []session.Lane{{Name: "exfat", Spec: "exfat", FS: "exfat"}}, Backend: "qemu", Created: t0.Add(time.Minute), Reason: "crash finished"},
			{ID: "s-3", State: "RUNNING", Lanes: []session.Lane{{Name: "ext2", Spec: "ext2", FS: "ext2"}}, Backend: "kvm", Created: t0.Add(2 * time.Minute)},
		},
		events: []session.Event{
			{Seq: 1, Session: "s-1", Kind: "session.created"},
			{Seq: 2, Session: "s-1", Kind: "explore.started", Detail: "depth 1, " + hostile},
		},
	}
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); resp.StatusCode == http.StatusOK && !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("%s: Content-Security-Policy %q", path, csp)
	}
	return resp.StatusCode, string(b)
}

// checkPage gets path and checks its status, and on a 200 that the body
// has every string of has, none of hasn, and no guest string unescaped.
func checkPage(t *testing.T, srv *httptest.Server, path string, code int, has, hasn []string) {
	t.Helper()
	got, body := get(t, srv, path)
	if got != code {
		t.Errorf("%s: %d, want %d\n%s", path, got, code, body)
		return
	}
	if strings.Contains(body, "<script>") {
		t.Errorf("%s: a guest's string reached the page unescaped", path)
	}
	for _, s := range has {
		if !strings.Contains(body, s) {
			t.Errorf("%s: no %q in\n%s", path, s, body)
		}
	}
	for _, s := range hasn {
		if strings.Contains(body, s) {
			t.Errorf("%s: %q should not be there", path, s)
		}
	}
}

// TestPages: every page renders, newest finding first, what a guest named
// escaped everywhere; the filters keep what they say; an unknown finding
// is 404 and a bad filter 400.
func TestPages(t *testing.T) {
	srv := httptest.NewServer(Handler(newStore(), nil, zap.NewNop()))
	defer srv.Close()
	for _, tt := range []struct {
		path      string
		code      int
		has, hasn []string
	}{
		{"/findings", 200, []string{"3 finding(s)", "f-3", "crash lost exfat", "6.1.0-57-cloud-amd64", "2026-12-04 11:00:00"}, nil},
		{"/findings?kind=kernel", 200, []string{"1 finding(s)", `href="/findings/f-2"`}, []string{`href="/findings/f-1"`}},
		{"/findings?lane=ext4", 200, []string{"2 finding(s)", `href="/findings/f-1"`, `href="/findings/f-2"`}, []string{`href="/findings/f-3"`}},
		{"/findings?status=new", 200, []string{"2 finding(s)", `href="/findings/f-1"`, `href="/findings/f-3"`}, []string{`href="/findings/f-2"`}},
		{"/findings?status=bogus", 400, nil, nil},
		{"/findings?image=stock", 200, []string{"1 finding(s)", `href="/findings/f-1"`, `name="image" value="stock"`}, nil},
		{"/findings?image=custom", 200, []string{"1 finding(s)", `href="/findings/f-2"`}, nil},
		{"/findings?image=mine.patch", 200, []string{"1 finding(s)", `href="/findings/f-2"`}, nil},
		{"/findings?image=01234567", 200, []string{"1 finding(s)", `href="/findings/f-2"`}, nil},
		{"/findings?image=0123", 200, []string{"0 finding(s)"}, nil},
		{"/findings?image=cloud&lane=ext4", 200, []string{"2 finding(s)"}, []string{`href="/findings/f-3"`}},
		{"/findings?image=6.1.0-57-cloud-amd64&kind=kernel", 200, []string{"1 finding(s)", `href="/findings/f-2"`}, nil},
		{"/findings/f-1", 200, []string{"mkdir &lt;script&gt;", "state-divergence|0|mkdir|nlink", `<form method="post" action="/findings/f-1/status">`}, nil},
		{"/findings/f-2", 200, []string{"kernel BUG at &lt;script&gt;", "ext4_mb_new_inode_pa&#43;0x1", "reported"}, nil},
		{"/findings/f-3", 200, []string{"LOST f: missing", "keeps 2 of 5 writes", "not counted"}, []string{"<form"}},
		{"/findings/f-nope", 404, nil, nil},
		{"/sessions", 200, []string{"s-1", "ENDED", "&lt;script&gt;"}, nil},
		{"/", 200, []string{"3 finding(s)"}, nil},
	} {
		checkPage(t, srv, tt.path, tt.code, tt.has, tt.hasn)
	}
	_, body := get(t, srv, "/findings")
	if i, j := strings.Index(body, "/findings/f-3"), strings.Index(body, "/findings/f-1"); i < 0 || j < 0 || i > j {
		t.Error("the findings are not newest first")
	}
}

// TestSetStatus: the form sets the status (every page then shows it); a
// POST another site made, a bad status and an unknown finding change
// nothing.
func TestSetStatus(t *testing.T) {
	st := newStore()
	srv := httptest.NewServer(Handler(st, nil, zap.NewNop()))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(id, status string, hdr map[string]string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/findings/"+id+"/status", strings.NewReader(url.Values{"status": {status}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		name, id, status string
		hdr              map[string]string
		code             int
	}{
		{"another site", "f-1", "expected", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"another origin", "f-1", "expected", map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"a bad status", "f-1", "fixed", nil, http.StatusBadRequest},
		{"an unknown finding", "f-nope", "expected", nil, http.StatusNotFound},
	} {
		if code := post(tt.id, tt.status, tt.hdr); code != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, code, tt.code)
		}
	}
	if f, _ := st.Finding(context.Background(), "f-1"); f.Seen.Status != "new" {
		t.Fatalf("a refused POST changed the status to %q", f.Seen.Status)
	}
	if code := post("f-1", "fixed-upstream", map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}); code != http.StatusSeeOther {
		t.Fatalf("the form: %d, want 303", code)
	}
	if _, body := get(t, srv, "/findings?status=fixed-upstream"); !strings.Contains(body, `href="/findings/f-1"`) {
		t.Error("the status set is not what the list shows")
	}
}

// TestPagesInChromium: the pages as a browser builds them (headless
// Chromium, from the test server on loopback): the findings table holds
// its rows, what a guest named is text and never an element, the status
// form is there.
func TestPagesInChromium(t *testing.T) {
	chromium := reporttest.Chromium(t)
	srv := httptest.NewServer(Handler(newStore(), nil, zap.NewNop()))
	defer srv.Close()
	for _, tt := range []struct {
		path string
		has  []string
	}{
		{"/findings", []string{`<table id="findings">`, `<a href="/findings/f-3">f-3</a>`, "3 finding(s)"}},
		{"/findings/f-1", []string{`<pre id="trace">mkdir &lt;script&gt;alert("x")&lt;/script&gt;&amp;"' 0755`, `<select name="status">`}},
		{"/findings/f-2", []string{`<pre id="kernel">kernel BUG at &lt;script&gt;`}},
		{"/sessions", []string{`<table id="sessions">`, "s-1"}},
	} {
		dom := reporttest.DumpURL(t, chromium, srv.URL+tt.path)
		for _, s := range tt.has {
			if !strings.Contains(dom, s) {
				t.Errorf("%s in Chromium: no %q in\n%s", tt.path, s, dom)
			}
		}
		if strings.Contains(dom, "<script") {
			t.Errorf("%s in Chromium: a script element", tt.path)
		}
	}
}
