package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/themisfs/themis/live"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/session"
)

// liveCSP is the session page's policy: its one script, from here, and
// its event stream, from here.
const liveCSP = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"

// eventsScanned bounds the events a session page reads for its run's
// kind and options (the run's "KIND.started" comes among the first).
const eventsScanned = 64

// pingEvery is how often an idle event stream says it is there (a client
// gone is noticed at the next write).
const pingEvery = 15 * time.Second

// sessionView is a session's page's data.
type sessionView struct {
	S             *session.Info
	Kind, Options string
	// Known says the daemon has the run's progress; Running that the run
	// goes on (the page subscribes); Last is its latest update.
	Known, Running bool
	Last           live.Update
	Findings       []session.Finding
	Truncated      bool
}

func (h *handler) session(w http.ResponseWriter, r *http.Request) {
	in, err := h.st.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	v := sessionView{S: in}
	var run live.Run
	run, v.Last, v.Known, v.Running = h.live.Lookup(in.ID)
	v.Kind, v.Options = run.Kind, run.Options
	if !v.Known {
		v.Kind, v.Options = h.runOf(r.Context(), in)
	}
	if v.Findings, v.Truncated, err = h.findingsOf(r.Context(), in.ID); err != nil {
		h.fail(w, err)
		return
	}
	for i, j := 0, len(v.Findings)-1; i < j; i, j = i+1, j-1 { // newest first
		v.Findings[i], v.Findings[j] = v.Findings[j], v.Findings[i]
	}
	w.Header().Set("Content-Security-Policy", liveCSP)
	h.render(w, "session.html", v)
}

// reportCSP is the run report's policy: the page is self-contained (inline
// styles and SVG), with no script.
const reportCSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"

// runReport is a finished explore run's HTML report, as `themisctl report
// --run` writes it (runreport).
func (h *handler) runReport(w http.ResponseWriter, r *http.Request) {
	run, err := h.st.RunPage(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	var page bytes.Buffer
	if err := runreport.Render(&page, run); err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Security-Policy", reportCSP)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if _, err := w.Write(page.Bytes()); err != nil {
		h.log.Debug("dashboard: run report: " + err.Error())
	}
}

// runOf is what the ledger says of the run a session served: the kind
// and the options its "KIND.started" event gives, else the kind its end's
// reason names ("crash finished"), else nothing.
func (h *handler) runOf(ctx context.Context, in *session.Info) (kind, options string) {
	evs, err := h.st.Events(ctx, in.ID, 0, eventsScanned)
	if err != nil {
		h.log.Debug("dashboard: events of " + in.ID + ": " + err.Error())
	}
	for _, e := range evs {
		if k, ok := strings.CutSuffix(e.Kind, ".started"); ok && k != "" && !strings.Contains(k, ".") {
			return k, e.Detail
		}
	}
	if k, _, ok := strings.Cut(in.Reason, " "); ok && runKinds[k] {
		return k, ""
	}
	return "", ""
}

// runKinds are the kinds a session's end reason may name.
var runKinds = map[string]bool{"explore": true, "crash": true, "sweep": true, "check": true, "profile": true, "corrupt": true, "replay": true, "export": true}

// findingsOf reads the findings of session id ("" every session's),
// oldest first.
func (h *handler) findingsOf(ctx context.Context, id string) ([]session.Finding, bool, error) {
	return readAll(func(after session.PageKey) ([]session.Finding, session.PageKey, error) {
		fs, err := h.st.FindingsPage(ctx, id, after, pageSize)
		if len(fs) == 0 {
			return fs, after, err
		}
		last := fs[len(fs)-1]
		return fs, session.PageKey{Created: last.Created, ID: last.ID}, err
	})
}

// events streams a session's live progress (text/event-stream): its last
// update at once, each that follows, and an "end" event when the run
// ends (or at once when none goes on). It ends with the request too.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	sub, err := h.live.Subscribe(id)
	if errors.Is(err, live.ErrTooMany) {
		http.Error(w, "too many live pages open", http.StatusServiceUnavailable)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	_, last, found, _ := h.live.Lookup(id)
	if found && last.Seq > 0 && !writeEvent(w, last) {
		return
	}
	if err != nil { // no run goes on: the last is all there is
		endStream(w)
		fl.Flush()
		return
	}
	defer sub.Close()
	fl.Flush()
	h.stream(r.Context(), w, fl, sub)
}

// stream writes sub's updates until the run or ctx ends.
func (h *handler) stream(ctx context.Context, w http.ResponseWriter, fl http.Flusher, sub *live.Sub) {
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
		case u, ok := <-sub.C():
			if ok && !writeEvent(w, u) {
				return
			}
			if !ok || u.Done {
				endStream(w)
				fl.Flush()
				return
			}
		}
		fl.Flush()
	}
}

// writeEvent writes u as one message event (JSON has no raw newline);
// false when the client is gone.
func writeEvent(w http.ResponseWriter, u live.Update) bool {
	b, err := json.Marshal(u)
	if err != nil {
		return false
	}
	_, err = fmt.Fprintf(w, "data: %s\n\n", b)
	return err == nil
}

// endStream tells the page the run is over (EventSource would reconnect
// after a stream that just closes).
func endStream(w http.ResponseWriter) {
	_, _ = fmt.Fprint(w, "event: end\ndata: {}\n\n")
}

// liveJS serves the session page's script.
func liveJS(w http.ResponseWriter, _ *http.Request) {
	b, err := staticFiles.ReadFile("static/live.js")
	if err != nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
