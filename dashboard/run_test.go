package dashboard

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/themisfs/themis/live"
	"github.com/themisfs/themis/report/reporttest"
)

// TestSessionPage: a session's page shows its run's kind and options (the
// live feed's while this daemon has it, else its "KIND.started" event's,
// else the kind its end names), its progress and its findings, escaped;
// only it lets a script (its own) run.
func TestSessionPage(t *testing.T) {
	hub := live.NewHub()
	f := hub.Start("explore", `lanes: "ext2" `+hostile)
	f.Publish("s-3", live.Update{States: 42, Unique: 17, Depth: 1, Findings: 2, Line: "42 states " + hostile})
	srv := httptest.NewServer(Handler(newStore(), hub, zap.NewNop()))
	defer srv.Close()
	for _, tt := range []struct {
		path      string
		code      int
		has, hasn []string
	}{
		{"/sessions", 200, []string{`<a href="/sessions/s-1">s-1</a>`, `<a href="/sessions/s-3">s-3</a>`}, nil},
		{"/sessions/s-1", 200, []string{`<td id="run-kind">explore</td>`, "depth 1, &lt;script&gt;", `href="/findings/f-1"`, "1 finding(s)", "No progress kept",
			`<a id="run-report" href="/sessions/s-1/report.html">`},
			[]string{"/static/live.js", `href="/findings/f-2"`}},
		{"/sessions/s-2", 200, []string{`<td id="run-kind">crash</td>`, "2 finding(s)", `href="/findings/f-3"`}, []string{"/static/live.js", "run-report"}},
		{"/sessions/s-1/report.html", 200, []string{`data-id="f-1"`, "explore ext2 &lt;script&gt;", `id="unique-by-depth"`}, []string{"<script>"}},
		{"/sessions/s-2/report.html", 404, nil, nil},
		{"/sessions/s-3", 200, []string{`<td id="run-kind">explore</td>`, `lanes: &#34;ext2&#34; &lt;script&gt;`, `<td id="live-states">42</td>`,
			`data-events="/sessions/s-3/events" data-running="true"`, `<script src="/static/live.js"></script>`, "42 states &lt;script&gt;"}, nil},
		{"/sessions/s-nope", 404, nil, nil},
	} {
		checkPage(t, srv, tt.path, tt.code, tt.has, tt.hasn)
	}
	for path, want := range map[string]string{"/sessions/s-3": liveCSP, "/findings": "default-src 'none'; style-src", "/sessions/s-1/report.html": reportCSP} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(got, want) {
			t.Errorf("%s: Content-Security-Policy %q, want %q", path, got, want)
		}
	}
	resp, err := http.Get(srv.URL + "/static/live.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("/static/live.js: %d %s", resp.StatusCode, ct)
	}
}

// sseEvent is one event of a stream: its name ("" for a message) and data.
type sseEvent struct{ name, data string }

// readEvents reads the events of an event stream until it ends.
func readEvents(t *testing.T, r *bufio.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			return out
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// TestEvents: a session's stream gives its last update at once, each
// that follows, then the last with done and an "end" event, and closes;
// a session with no run going on gets what is kept and "end" at once; a
// stream ends with its request.
func TestEvents(t *testing.T) {
	hub := live.NewHub()
	f := hub.Start("crash", "")
	f.Publish("s-3", live.Update{States: 1, Line: hostile})
	srv := httptest.NewServer(Handler(newStore(), hub, zap.NewNop()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/sessions/s-3/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	first := readEvents(t, r, 1)
	f.Publish("s-3", live.Update{States: 2})
	second := readEvents(t, r, 1)
	f.End()
	rest := readEvents(t, r, 10)
	var got []live.Update
	for _, e := range append(append(first, second...), rest...) {
		if e.name == "end" {
			continue
		}
		var u live.Update
		if err := json.Unmarshal([]byte(e.data), &u); err != nil {
			t.Fatalf("event %q: %v", e.data, err)
		}
		got = append(got, u)
	}
	if len(got) != 3 || got[0].States != 1 || got[0].Line != hostile || got[1].States != 2 || !got[2].Done || len(rest) != 2 || rest[1].name != "end" {
		t.Errorf("events %+v (after the end: %+v): want 1, 2, done, then end", got, rest)
	}
	for path, n := range map[string]int{"/sessions/s-3/events": 2, "/sessions/s-1/events": 1} { // ended; never live
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		evs := readEvents(t, bufio.NewReader(resp.Body), 10)
		resp.Body.Close()
		if len(evs) != n || evs[n-1].name != "end" {
			t.Errorf("%s: %+v: want %d events, the last end", path, evs, n)
		}
	}
	g := hub.Start("explore", "")
	g.Publish("s-4", live.Update{})
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/sessions/s-4/events", nil)
	client := &http.Client{Timeout: time.Second}
	if resp, err := client.Do(req); err == nil { // the client gives up: the handler returns
		_, _ = bufio.NewReader(resp.Body).ReadString('\n')
		resp.Body.Close()
	}
	g.End()
}

// TestLivePageInChromium: the session page's script, in a browser, takes
// the updates that follow the render from the event stream and sets them
// as text: the DOM holds the last update, what a guest named escaped, and
// the run ended.
func TestLivePageInChromium(t *testing.T) {
	chromium := reporttest.Chromium(t)
	hub := live.NewHub()
	f := hub.Start("explore", "")
	f.Publish("s-3", live.Update{States: 1, Line: "at render"})
	subscribed := make(chan struct{}, 1)
	h := Handler(newStore(), hub, zap.NewNop())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			select {
			case subscribed <- struct{}{}:
			default:
			}
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	go func() {
		<-subscribed
		time.Sleep(200 * time.Millisecond) // the stream has subscribed
		f.Publish("s-3", live.Update{States: 99, Unique: 7, Line: "live " + hostile})
		f.End()
	}()
	dom := reporttest.DumpURLAfter(t, chromium, srv.URL+"/sessions/s-3", 5*time.Second)
	for _, s := range []string{`<td id="live-states">99</td>`, `<td id="live-unique">7</td>`, `live &lt;script&gt;alert("x")&lt;/script&gt;&amp;"'`, "ended (reload for the findings)"} {
		if !strings.Contains(dom, s) {
			t.Errorf("no %q in\n%s", s, dom)
		}
	}
}
