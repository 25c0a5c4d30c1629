package dashboard

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/live"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/runs/export"
	"github.com/themisfs/themis/session"
)

// Store is what the pages read, and the one thing they write: the
// methods of *session.Manager they need.
type Store interface {
	FindingsPage(ctx context.Context, sessionID string, after session.PageKey, limit int) ([]session.Finding, error)
	Finding(ctx context.Context, id string) (*session.Finding, error)
	SetFindingStatus(ctx context.Context, id, status string) (*session.Finding, error)
	ListPage(ctx context.Context, all bool, after session.PageKey, limit int) ([]*session.Info, error)
	Get(ctx context.Context, id string) (*session.Info, error)
	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]session.Event, error)
	// Export builds finding f's reproducer (runs/export.Run: what
	// `themisctl findings export` gets through the Export RPC).
	Export(ctx context.Context, f *session.Finding, o export.Options, out export.Sinks) (*export.Summary, error)
	// RunPage is the page of a finished explore run the ledger kept
	// (what `themisctl report --run` draws; errkind.ErrNotFound when the
	// session's run kept none).
	RunPage(ctx context.Context, sessionID string) (*runreport.Run, error)
}

// MaxListed bounds the findings and the sessions a list page reads (the
// newest are shown).
const MaxListed = 5000

// pageSize is how many rows one ledger read takes.
const pageSize = 500

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static/live.js
var staticFiles embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"when": when,
}).ParseFS(templateFiles, "templates/*.html"))

// when is a time for a page ("" for none).
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

type handler struct {
	st      Store
	live    *live.Hub
	log     *zap.Logger
	exports chan struct{} // a token per export running (MaxExports)

	stopping context.Context // cancelled by Close: the exports end
	stop     context.CancelFunc
	mu       sync.Mutex
	closed   bool
	running  sync.WaitGroup // the exports under way
}

// Dashboard is the dashboard's handler.
type Dashboard struct {
	http.Handler
	h *handler
}

// Close cancels the exports under way and waits for them to return;
// later downloads are refused (503). The daemon calls it before it
// closes the domain. It is idempotent.
func (d *Dashboard) Close() {
	d.h.mu.Lock()
	d.h.closed = true
	d.h.mu.Unlock()
	d.h.stop()
	d.h.running.Wait()
}

// Handler serves the dashboard over st, the runs' progress from hub (nil:
// none is live).
func Handler(st Store, hub *live.Hub, log *zap.Logger) *Dashboard {
	h := &handler{st: st, live: hub, log: log, exports: make(chan struct{}, MaxExports)}
	h.stopping, h.stop = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/findings", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /findings", h.findings)
	mux.HandleFunc("GET /findings/{id}", h.finding)
	mux.HandleFunc("POST /findings/{id}/status", h.setStatus)
	mux.HandleFunc("GET /findings/{id}/bundle.tar.gz", h.bundle)
	mux.HandleFunc("GET /findings/{id}/crash.img", h.crashImage)
	mux.HandleFunc("GET /sessions", h.sessions)
	mux.HandleFunc("GET /sessions/{id}", h.session)
	mux.HandleFunc("GET /sessions/{id}/events", h.events)
	mux.HandleFunc("GET /sessions/{id}/report.html", h.runReport)
	mux.HandleFunc("GET /static/live.js", liveJS)
	return &Dashboard{Handler: secureHeaders(mux), h: h}
}

// secureHeaders sets what every page sends: no script, no framing, no
// sniffing.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// render writes page name with data, or a 500 logged.
func (h *handler) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		h.log.Warn("dashboard: render "+name, zap.Error(err))
	}
}

// fail answers err: 404 for errkind.ErrNotFound, 400 for a bad argument,
// else 500 (logged, not shown).
func (h *handler) fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errkind.ErrNotFound):
		http.Error(w, "not found", http.StatusNotFound)
	case errors.Is(err, errkind.ErrInvalid), errors.Is(err, errkind.ErrState):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		h.log.Warn("dashboard", zap.Error(err))
		http.Error(w, "the ledger could not be read", http.StatusInternalServerError)
	}
}

// filter is a findings list's query: each empty is any.
type filter struct{ Lane, Kind, Image, Status string }

func (f filter) keeps(fd *session.Finding) bool {
	return (f.Lane == "" || slices.ContainsFunc(fd.LaneSpecs, func(l string) bool { return l == f.Lane || strings.HasPrefix(l, f.Lane+":") })) &&
		(f.Kind == "" || fd.Kind == f.Kind) && (f.Image == "" || imageIs(fd.Image, f.Image)) &&
		(f.Status == "" || api.StatusOf(fd.Seen.Status) == f.Status)
}

// minKeyPrefix is the shortest image key prefix a filter names an image by.
const minKeyPrefix = 8

// imageIs says whether the image a finding was found on is the one q
// names: "stock" (no code of its own) or "custom", its key or a prefix of
// at least minKeyPrefix characters, its kernel version, its flavour, or
// one of its patches or module sources by name. A finding stored before
// images were kept is none.
func imageIs(r *guest.Ref, q string) bool {
	switch {
	case r == nil:
		return false
	case q == "stock" || q == "custom":
		return r.Custom() == (q == "custom")
	case q == r.Key || len(q) >= minKeyPrefix && strings.HasPrefix(r.Key, q), q == r.KernelVersion, q == r.Flavor:
		return true
	}
	named := func(in guest.Input) bool { return in.Name == q }
	return slices.ContainsFunc(r.Patches, named) || slices.ContainsFunc(r.Sources, named)
}

// findingsView is the findings page's data.
type findingsView struct {
	Filter    filter
	Findings  []session.Finding
	Truncated bool
	Statuses  []string
}

func (h *handler) findings(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := filter{Lane: q.Get("lane"), Kind: q.Get("kind"), Image: q.Get("image"), Status: q.Get("status")}
	if f.Status != "" && !slices.Contains(api.FindingStatuses, f.Status) {
		http.Error(w, "status: want one of "+strings.Join(api.FindingStatuses, ", "), http.StatusBadRequest)
		return
	}
	all, truncated, err := h.findingsOf(r.Context(), "")
	if err != nil {
		h.fail(w, err)
		return
	}
	v := findingsView{Filter: f, Truncated: truncated, Statuses: api.FindingStatuses}
	for i := len(all) - 1; i >= 0; i-- { // newest first
		if f.keeps(&all[i]) {
			v.Findings = append(v.Findings, all[i])
		}
	}
	h.render(w, "findings.html", v)
}

// readAll reads pages until one is short or MaxListed rows are read; it
// keeps the newest MaxListed (truncated says some older were left out).
func readAll[T any](page func(after session.PageKey) ([]T, session.PageKey, error)) (all []T, truncated bool, err error) {
	var after session.PageKey
	for {
		rows, next, err := page(after)
		if err != nil {
			return nil, false, err
		}
		all = append(all, rows...)
		if len(all) > MaxListed {
			all, truncated = all[len(all)-MaxListed:], true
		}
		if len(rows) < pageSize {
			return all, truncated, nil
		}
		after = next
	}
}

// findingView is a finding's page's data.
type findingView struct {
	F        *session.Finding
	Statuses []string
}

func (h *handler) finding(w http.ResponseWriter, r *http.Request) {
	f, err := h.st.Finding(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	h.render(w, "finding.html", findingView{F: f, Statuses: api.FindingStatuses})
}

// setStatus sets a finding's status from its page's form. A POST from
// another origin (a page elsewhere that the browser would let post here)
// is refused.
func (h *handler) setStatus(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "a status is set from the dashboard's own pages", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form: "+err.Error(), http.StatusBadRequest)
		return
	}
	id := r.PathValue("id")
	if _, err := h.st.SetFindingStatus(r.Context(), id, r.PostForm.Get("status")); err != nil {
		h.fail(w, err)
		return
	}
	http.Redirect(w, r, "/findings/"+url.PathEscape(id), http.StatusSeeOther)
}

// sameOrigin reports whether r comes from the dashboard's own pages: a
// browser sends Sec-Fetch-Site or Origin with a POST; a request that
// names another site is refused, one that names none (curl) is not.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// sessionsView is the sessions page's data.
type sessionsView struct {
	Sessions  []*session.Info
	Truncated bool
}

func (h *handler) sessions(w http.ResponseWriter, r *http.Request) {
	all, truncated, err := readAll(func(after session.PageKey) ([]*session.Info, session.PageKey, error) {
		ss, err := h.st.ListPage(r.Context(), true, after, pageSize)
		if len(ss) == 0 {
			return ss, after, err
		}
		last := ss[len(ss)-1]
		return ss, session.PageKey{Created: last.Created, ID: last.ID}, err
	})
	if err != nil {
		h.fail(w, err)
		return
	}
	slices.Reverse(all)
	h.render(w, "sessions.html", sessionsView{Sessions: all, Truncated: truncated})
}
