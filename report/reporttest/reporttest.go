package reporttest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// LayoutMap is one lane's layout map as drawn.
type LayoutMap struct {
	// ID is the svg element's id (layout-map-<i>).
	ID string
	// Regions counts rect.region (the parsed view), Runs rect.run (the
	// written view).
	Regions, Runs int
	// RegionRows counts the rows of its region table (0 without one).
	RegionRows int
}

// Figures is what a page shows, counted from its DOM.
type Figures struct {
	// Layouts is the layout maps by lane (the svg's data-lane).
	Layouts map[string]LayoutMap
	// Chart is whether svg#amplification-curve exists; ChartPoints counts
	// its circle.point elements, ChartSeries its series groups.
	Chart                    bool
	ChartPoints, ChartSeries int
	// Blast is whether table#blast-radius exists; BlastLanes are its
	// column heads after "target", BlastRows its body rows and BlastCells
	// the body cells that hold a class (not "—").
	Blast                 bool
	BlastLanes            []string
	BlastRows, BlastCells int
	// ProfileRows and DetailRows count the body rows of table#profile-rows
	// and table#blast-radius-details.
	ProfileRows, DetailRows int
	// Scripts counts script elements; External lists URL attributes (href,
	// src, xlink:href, action, ...) that do not point into the page, and
	// link, iframe, object, embed, img elements.
	Scripts  int
	External []string
}

// Parse reads an HTML page and counts its figures.
func Parse(r io.Reader) (*Figures, error) {
	doc, err := html.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("reporttest: parse: %w", err)
	}
	f := &Figures{Layouts: map[string]LayoutMap{}}
	maps := map[string]string{} // svg id -> lane
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		switch n.Data {
		case "script":
			f.Scripts++
		case "link", "iframe", "object", "embed", "img", "frame", "base":
			f.External = append(f.External, "<"+n.Data+">")
		case "style":
			if css := strings.ToLower(text(n)); strings.Contains(css, "url(") || strings.Contains(css, "@import") {
				f.External = append(f.External, "<style> with url() or @import")
			}
		}
		for _, a := range n.Attr {
			switch strings.ToLower(a.Key) {
			case "href", "src", "action", "formaction", "poster", "srcset", "background":
				if !strings.HasPrefix(a.Val, "#") {
					f.External = append(f.External, fmt.Sprintf("<%s %s=%q>", n.Data, a.Key, a.Val))
				}
			}
			if v := strings.ToLower(a.Val); a.Key != "xmlns" && (strings.Contains(v, "url(") || strings.Contains(v, "://")) {
				f.External = append(f.External, fmt.Sprintf("<%s %s=%q>", n.Data, a.Key, a.Val))
			}
		}
		id := attr(n, "id")
		switch {
		case n.Data == "svg" && hasClass(n, "layout-map"):
			m := LayoutMap{ID: id}
			walk(n, func(c *html.Node) {
				if c.Type == html.ElementNode && c.Data == "rect" {
					if hasClass(c, "region") {
						m.Regions++
					}
					if hasClass(c, "run") {
						m.Runs++
					}
				}
			})
			lane := attr(n, "data-lane")
			f.Layouts[lane] = m
			maps[strings.TrimPrefix(id, "layout-map-")] = lane
		case n.Data == "svg" && id == "amplification-curve":
			f.Chart = true
			walk(n, func(c *html.Node) {
				if c.Type == html.ElementNode && c.Data == "circle" && hasClass(c, "point") {
					f.ChartPoints++
				}
				if c.Type == html.ElementNode && c.Data == "g" && hasClass(c, "series-group") {
					f.ChartSeries++
				}
			})
		case n.Data == "table" && id == "blast-radius":
			f.Blast = true
			for i, th := range elements(n, "th") {
				if i > 0 {
					f.BlastLanes = append(f.BlastLanes, text(th))
				}
			}
			for _, tr := range bodyRows(n) {
				f.BlastRows++
				for i, td := range elements(tr, "td") {
					if i > 0 && strings.TrimSpace(text(td)) != "—" {
						f.BlastCells++
					}
				}
			}
		case n.Data == "table" && id == "profile-rows":
			f.ProfileRows = len(bodyRows(n))
		case n.Data == "table" && id == "blast-radius-details":
			f.DetailRows = len(bodyRows(n))
		}
	})
	// Region tables, matched to their maps by index.
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" && strings.HasPrefix(attr(n, "id"), "layout-regions-") {
			lane, ok := maps[strings.TrimPrefix(attr(n, "id"), "layout-regions-")]
			if ok {
				m := f.Layouts[lane]
				m.RegionRows = len(bodyRows(n))
				f.Layouts[lane] = m
			}
		}
	})
	return f, nil
}

func walk(n *html.Node, fn func(*html.Node)) {
	fn(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(attr(n, "class")) {
		if c == class {
			return true
		}
	}
	return false
}

func elements(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	walk(n, func(c *html.Node) {
		if c != n && c.Type == html.ElementNode && c.Data == tag {
			out = append(out, c)
		}
	})
	return out
}

func bodyRows(table *html.Node) []*html.Node {
	var out []*html.Node
	for _, tb := range elements(table, "tbody") {
		out = append(out, elements(tb, "tr")...)
	}
	return out
}

func text(n *html.Node) string {
	var b strings.Builder
	walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	})
	return b.String()
}

// LookChromium returns the path of the chromium binary on PATH, if any.
func LookChromium() (string, bool) {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// Chromium returns the path of the chromium binary, skipping t where there
// is none (failing under CI=true).
func Chromium(t testing.TB) string {
	t.Helper()
	if p, ok := LookChromium(); ok {
		return p
	}
	const why = "chromium not on PATH (Debian package chromium; scripts/install-deps.sh installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal("required under CI=true: " + why)
	}
	t.Skip("skipped: " + why)
	return ""
}

// DumpDOM loads the page file in headless Chromium, with the network off,
// and returns the DOM it built, serialized.
func DumpDOM(t testing.TB, chromium, file string) string {
	t.Helper()
	return dump(t, chromium, "file://"+file, "MAP * ~NOTFOUND")
}

// DumpURL is DumpDOM of the page a server on 127.0.0.1 serves at url:
// that address answers, every name resolves to nothing and every other
// address goes to a proxy that is not there.
func DumpURL(t testing.TB, chromium, url string) string {
	t.Helper()
	return dump(t, chromium, url, "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
}

// DumpURLAfter is DumpURL once the page's scripts have had budget of
// virtual time (Chromium's --virtual-time-budget) after it loaded: what a
// script made of what it fetched from that server.
func DumpURLAfter(t testing.TB, chromium, url string, budget time.Duration) string {
	t.Helper()
	return dump(t, chromium, url, "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds()))
}

// dump runs headless Chromium's --dump-dom of url under the host
// resolver rules given.
func dump(t testing.TB, chromium, url, resolverRules string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(),
		// Any fetch would fail: the page must not need one.
		"--host-resolver-rules=" + resolverRules, "--proxy-server=127.0.0.1:9"}, extra...)
	cmd := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", url, err, tail(stderr.String(), 2000))
	}
	if len(out) == 0 {
		t.Fatalf("chromium --dump-dom %s: empty DOM\n%s", url, tail(stderr.String(), 2000))
	}
	return string(out)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
