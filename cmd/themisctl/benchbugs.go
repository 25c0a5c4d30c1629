package main

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bugs"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
)

// newBenchBugs is `themisctl bench bugs`: the same default check on every
// case of the corpus and on the stock image of each case's filesystem and
// flavour (docs/bugs.md).
func newBenchBugs(g *globals) *cobra.Command {
	var corpus, only, report, versus, baseline string
	var budget time.Duration
	cmd := &cobra.Command{
		Use:   "bugs",
		Short: "Run the same default check on every case of the real-bug corpus (bugs/) and on the stock images: detected or missed, time to detect, the stock baseline",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cases, err := bugs.Load(corpus)
			if err != nil {
				return err
			}
			if cases, err = pickCases(cases, splitList(only)); err != nil {
				return err
			}
			if budget < 10*time.Second || budget%time.Second != 0 {
				return fmt.Errorf("--budget %s: want whole seconds, at least 10s", budget)
			}
			if versus != "" && versus != "explore" {
				return fmt.Errorf("--versus %q: want explore (or nothing)", versus)
			}
			if baseline != "" && versus != "" {
				return fmt.Errorf("--baseline with --versus: a reused baseline has no plain explore of its own to compare")
			}
			prior, err := loadBaselines(baseline, budget)
			if err != nil {
				return err
			}
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				rep := runBenchBugs(ctx, g, c, cache, cases, budget, versus == "explore", prior)
				if report != "" {
					if err := writeBugsReport(report, rep); err != nil {
						return err
					}
				}
				if g.json {
					return writeProtoJSON(rep.proto())
				}
				printBugsReport(rep)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&corpus, "corpus", "bugs", "the corpus directory (one case per subdirectory: case.toml and bug.patch)")
	f.StringVar(&only, "cases", "", "case ids to run, comma-separated (default all)")
	f.DurationVar(&budget, "budget", 10*time.Minute, "each check's budget (themisctl check --budget), the stock checks' too")
	f.StringVar(&report, "report", "", "also write the results to this file: as one self-contained HTML page, or as --json prints them when it ends in .json")
	f.StringVar(&baseline, "baseline", "", "reuse the stock baselines of an earlier run's --report FILE.json with the same budget, where the stock image is still the same (a filesystem it lacks is checked here)")
	f.StringVar(&versus, "versus", "", "also run plain explore (explore --fs REF,FS, its defaults, max-seconds the budget) on every case and stock image, side by side: \"explore\"")
	return cmd
}

// pickCases keeps the cases named (all when none is).
func pickCases(all []bugs.Case, ids []string) ([]bugs.Case, error) {
	if len(ids) == 0 {
		return all, nil
	}
	var out []bugs.Case
	for _, id := range ids {
		i := slices.IndexFunc(all, func(c bugs.Case) bool { return c.ID == id })
		if i < 0 {
			return nil, fmt.Errorf("--cases: no case %q in the corpus", id)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// bugsReport is bench bugs' result; --json prints it as proto.
type bugsReport struct {
	Budget   time.Duration
	Cases    int
	Detected int
	// Reproduced counts the detections that showed again when replayed
	// in a fresh session (bugs.Outcome.Reproduced).
	Reproduced int
	Outcomes   []bugs.Outcome
	Baselines  []*stockBaseline
	Medians    []bugs.ClassMedian
	Started    time.Time
	Elapsed    time.Duration
}

// stockBaseline is the check of one filesystem on its flavour's stock
// image: what it found is not a case's detection.
type stockBaseline struct {
	FS     string
	Flavor string
	Image  string
	// Keys are what the stock check found and the triaged stock findings
	// of the filesystem (bugs.TriagedStock).
	Keys []string
	// ExploreKeys are plain explore's (--versus explore).
	ExploreKeys []string
	Findings    int
	Elapsed     time.Duration
	Err         string
	// From is the report a reused baseline came from (--baseline) and
	// when its run started; empty: checked in this run.
	From string
}

// proto is the report as --json prints it (themis.v1.BugsReport).
func (rep *bugsReport) proto() *themisv1.BugsReport {
	out := &themisv1.BugsReport{BudgetS: rep.Budget.Seconds(), Cases: int32(rep.Cases), Detected: int32(rep.Detected),
		Reproduced: int32(rep.Reproduced), ElapsedS: rep.Elapsed.Seconds()}
	if !rep.Started.IsZero() {
		out.Started = timestamppb.New(rep.Started)
	}
	for _, o := range rep.Outcomes {
		c := o.Case
		m := &themisv1.BugsOutcome{Case: &themisv1.BugsCase{Id: c.ID, Fs: c.FS, Flavor: c.Flavor, Class: c.Class, Kind: c.Kind, Fix: c.Fix,
			Reference: c.Reference, Summary: c.Summary, Patch: c.Patch},
			Detected: o.Detected, FirstS: o.First.Seconds(), FirstKey: o.FirstKey, FirstPart: o.FirstPart, FirstDetail: o.FirstDetail,
			StockClean: o.StockClean, Findings: int32(o.Findings), InBaseline: int32(o.InBaseline), States: o.States,
			ElapsedS: o.Elapsed.Seconds(), Reproduced: o.Reproduced, Repro: o.Repro, Error: o.Err}
		if d := o.Explore; d != nil {
			m.Explore = &themisv1.BugsDetection{Command: d.Command, Detected: d.Detected, FirstS: d.First.Seconds(), FirstKey: d.FirstKey,
				Findings: int32(d.Findings), InBaseline: int32(d.InBaseline), States: d.States, ElapsedS: d.Elapsed.Seconds(), Error: d.Err}
		}
		out.Outcomes = append(out.Outcomes, m)
	}
	for _, b := range rep.Baselines {
		out.Baselines = append(out.Baselines, &themisv1.BugsBaseline{Fs: b.FS, Flavor: b.Flavor, Image: b.Image, Keys: b.Keys,
			ExploreKeys: b.ExploreKeys, Findings: int32(b.Findings), ElapsedS: b.Elapsed.Seconds(), Error: b.Err, From: b.From})
	}
	for _, m := range rep.Medians {
		out.Medians = append(out.Medians, &themisv1.BugsClassMedian{Class: m.Class, Cases: int32(m.Cases), Detected: int32(m.Detected),
			MedianS: m.Median.Seconds()})
	}
	return out
}

// runBenchBugs checks each filesystem's stock image once (or takes its
// baseline from prior), then every case of that filesystem on its patched
// image, all under the same default check and budget.
func runBenchBugs(ctx context.Context, g *globals, c *conn, cache string, cases []bugs.Case, budget time.Duration, versus bool, prior map[string]*stockBaseline) *bugsReport {
	rep := &bugsReport{Budget: budget, Cases: len(cases), Started: time.Now()}
	stock := map[string]*stockBaseline{}
	steps := int64(len(cases) + len(baselineKeys(cases))) // a check each
	done := int64(0)
	left := func() string {
		if l := timeLeft(0, time.Since(rep.Started), done, steps); l != "" {
			return " (" + l + ")"
		}
		return ""
	}
	for i, bc := range cases {
		key := baselineKey(bc)
		base, ok := stock[key]
		if !ok {
			if base = reuseBaseline(ctx, g, cache, bc, prior[key]); base == nil {
				base = stockCheck(ctx, g, c, cache, bc, budget, versus)
				done++
			} else {
				steps-- // no check: it would make the time left look short
			}
			stock[key] = base
			rep.Baselines = append(rep.Baselines, base)
		}
		progress(fmt.Sprintf("[%d/%d] %s (%s, %s)%s", i+1, len(cases), bc.ID, bc.Class, bc.FS, left()))
		o := caseCheck(ctx, g, c, cache, bc, budget, base, versus)
		done++
		progress(fmt.Sprintf("[%d/%d] %s: %s%s", i+1, len(cases), bc.ID, outcomeText(o), left()))
		rep.Outcomes = append(rep.Outcomes, o)
		if o.Detected {
			rep.Detected++
		}
		if o.Reproduced {
			rep.Reproduced++
		}
	}
	rep.Medians, rep.Elapsed = bugs.Medians(rep.Outcomes), time.Since(rep.Started)
	return rep
}

// baselineKey is the stock baseline a case is judged against: its
// filesystem's on its flavour's stock image.
func baselineKey(bc bugs.Case) string { return bc.FS + "/" + bc.Flavor }

// baselineKeys are the distinct baselines of cases.
func baselineKeys(cases []bugs.Case) map[string]bool {
	keys := map[string]bool{}
	for _, bc := range cases {
		keys[baselineKey(bc)] = true
	}
	return keys
}

// stockCheck checks bc's filesystem on its flavour's stock image.
func stockCheck(ctx context.Context, g *globals, c *conn, cache string, bc bugs.Case, budget time.Duration, versus bool) *stockBaseline {
	base := &stockBaseline{FS: bc.FS, Flavor: bc.Flavor}
	progress(fmt.Sprintf("stock %s on the %s image: the baseline", bc.FS, bc.Flavor))
	img, err := stockImage(ctx, g, cache, bc)
	if err != nil {
		base.Err = err.Error()
		return base
	}
	base.Image = img
	seen, err := observeCheck(ctx, c, &themisv1.CheckRequest{Lanes: []string{bc.FS}, Image: img, BudgetSeconds: int32(budget / time.Second)}, nil)
	if err != nil {
		base.Err = err.Error()
		return base
	}
	base.Elapsed, base.Findings, base.Keys = seen.elapsed, len(seen.events), seen.keys()
	base.Keys = withTriaged(base.Keys, bc.FS)
	if versus {
		ex, err := observeExplore(ctx, c, exploreVersus(bc.FS, img, budget), nil)
		if err != nil {
			base.Err = "explore: " + err.Error()
			return base
		}
		base.ExploreKeys = ex.keys()
	}
	return base
}

// stockImage is the key of bc's flavour's stock image (built or cached).
func stockImage(ctx context.Context, g *globals, cache string, bc bugs.Case) (string, error) {
	img, err := guest.Build(ctx, guest.Options{CacheDir: cache, Flavor: bc.Flavor, Log: g.log})
	if err != nil {
		return "", fmt.Errorf("stock image: %w", err)
	}
	return img.Key, nil
}

// reuseBaseline is prior (nil: none) when it was made on the stock image
// bc's check would use now; else nil, and the baseline is checked again.
func reuseBaseline(ctx context.Context, g *globals, cache string, bc bugs.Case, prior *stockBaseline) *stockBaseline {
	if prior == nil {
		return nil
	}
	img, err := stockImage(ctx, g, cache, bc)
	if err != nil || img != prior.Image {
		progress(fmt.Sprintf("stock %s on the %s image: --baseline's was made on image %.12s, not %.12s: checking again", bc.FS, bc.Flavor, prior.Image, img))
		return nil
	}
	progress(fmt.Sprintf("stock %s on the %s image: the baseline of %s (%d findings)", bc.FS, bc.Flavor, prior.From, prior.Findings))
	return prior
}

// loadBaselines reads the stock baselines of an earlier bench bugs
// --report FILE.json ("": none), by baselineKey. Its budget must be
// budget; a baseline that failed is not taken.
func loadBaselines(path string, budget time.Duration) (map[string]*stockBaseline, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--baseline: %w", err)
	}
	var rep themisv1.BugsReport
	if err := jsonout.DecodeInto(b, &rep); err != nil {
		return nil, fmt.Errorf("--baseline %s: %w", path, err)
	}
	if got := time.Duration(rep.GetBudgetS() * float64(time.Second)); got != budget {
		return nil, fmt.Errorf("--baseline %s: its budget is %s, this run's %s (a baseline is only as wide as its budget)", path, got, budget)
	}
	from := path
	if rep.GetStarted() != nil {
		from += ", run of " + rep.GetStarted().AsTime().UTC().Format(time.RFC3339)
	}
	out := map[string]*stockBaseline{}
	for _, p := range rep.GetBaselines() {
		if p.GetError() != "" || p.GetImage() == "" {
			continue
		}
		out[p.GetFs()+"/"+p.GetFlavor()] = &stockBaseline{FS: p.GetFs(), Flavor: p.GetFlavor(), Image: p.GetImage(), Keys: p.GetKeys(),
			Findings: int(p.GetFindings()), Elapsed: time.Duration(p.GetElapsedS() * float64(time.Second)), From: from}
	}
	return out, nil
}

// withTriaged is keys with the stock findings of fs that docs/hunt.md
// triages (bugs.TriagedStock) added, sorted: a baseline run that did not
// meet one does not make it a case's detection.
func withTriaged(keys []string, fs string) []string {
	for _, k := range bugs.TriagedKeys(fs) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// keys are the distinct keys of what a run found, sorted.
func (s *checkSeen) keys() []string {
	var out []string
	for _, e := range s.events {
		if !slices.Contains(out, e.key) {
			out = append(out, e.key)
		}
	}
	sort.Strings(out)
	return out
}

// exploreVersus is plain explore of fs against the reference lane check
// would add, on image, for the budget: what a user ran before check.
func exploreVersus(fs, image string, budget time.Duration) *themisv1.ExploreRequest {
	lanes := []string{fs}
	if ref, _, err := family.Reference(fs); err == nil {
		lanes = []string{ref, fs}
	}
	return &themisv1.ExploreRequest{Lanes: lanes, Image: image, MaxSeconds: int32(budget / time.Second), Seed: 1}
}

// caseCheck builds bc's image and checks it; its first finding outside
// the baseline is its detection.
func caseCheck(ctx context.Context, g *globals, c *conn, cache string, bc bugs.Case, budget time.Duration, base *stockBaseline, versus bool) bugs.Outcome {
	o := bugs.Outcome{Case: bc}
	if base.Err != "" {
		o.Err = "no stock baseline: " + base.Err
		return o
	}
	img, err := guest.Build(ctx, guest.Options{CacheDir: cache, Flavor: bc.Flavor, Patches: []string{bc.Patch}, Name: "bug-" + bc.ID, Log: g.log})
	if err != nil {
		o.Err = fmt.Sprintf("build: %v", err)
		return o
	}
	// The check stops at its first finding outside the baseline: the rest
	// of the budget would tell nothing more about this case.
	outside := func(key string) bool { return !bugs.InBaseline(base.Keys, key) }
	seen, err := observeCheck(ctx, c, &themisv1.CheckRequest{Lanes: []string{bc.FS}, Image: img.Key, BudgetSeconds: int32(budget / time.Second)}, outside)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	o.Elapsed, o.States, o.Findings = seen.elapsed, seen.states, len(seen.events)
	outsideAt := len(seen.events) // the first event outside the baseline
	for i, e := range seen.events {
		if !outside(e.key) {
			o.InBaseline++
		} else if outsideAt == len(seen.events) {
			outsideAt = i
		}
	}
	candidates := seen.events[:outsideAt]
	if outsideAt == len(seen.events) {
		candidates = withLedgerLosses(ctx, c, seen, candidates)
	}
	if e, why, ok := stockClean(ctx, c, base.Image, candidates); ok {
		o.StockClean = why
		detect(ctx, c, bc, img.Key, &o, e)
	} else if outsideAt < len(seen.events) {
		detect(ctx, c, bc, img.Key, &o, seen.events[outsideAt])
	}
	if versus {
		o.Explore = exploreDetection(ctx, c, bc.FS, img.Key, budget, base.ExploreKeys)
	}
	return o
}

// detect makes e o's detection and replays it on the patched image.
func detect(ctx context.Context, c *conn, bc bugs.Case, image string, o *bugs.Outcome, e checkEvent) {
	o.Detected, o.First, o.FirstKey, o.FirstPart, o.FirstDetail = true, e.at, e.key, e.part, e.detail
	o.Reproduced, o.Repro = reproduceDetection(ctx, c, bc, image, e)
}

// exploreDetection is plain explore's run on a case's image, judged
// against its own stock baseline.
func exploreDetection(ctx context.Context, c *conn, fs, image string, budget time.Duration, base []string) *bugs.Detection {
	req := exploreVersus(fs, image, budget)
	d := &bugs.Detection{Command: "explore --fs " + strings.Join(req.GetLanes(), ",")}
	outside := func(key string) bool { return !bugs.InBaseline(base, key) }
	seen, err := observeExplore(ctx, c, req, outside)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	d.Findings, d.States, d.Elapsed = len(seen.events), seen.states, seen.elapsed
	for _, e := range seen.events {
		if !outside(e.key) {
			d.InBaseline++
		} else if !d.Detected {
			d.Detected, d.First, d.FirstKey = true, e.at, e.key
		}
	}
	return d
}

// observeExplore runs an explore and records its findings with the time
// each came, stopping at the first stopAt takes (nil: none).
func observeExplore(ctx context.Context, c *conn, req *themisv1.ExploreRequest, stopAt func(key string) bool) (*checkSeen, error) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Explore(ctx, req)
	if err != nil {
		return nil, err
	}
	seen, ids := &checkSeen{stopAt: stopAt, cancel: cancel}, map[string]bool{}
	err = client.Drain(stream.Recv, func(m *themisv1.ExploreResponse) error {
		if p := m.GetProgress(); p != nil {
			seen.states = p.GetStates()
		}
		if s := m.GetSummary(); s != nil {
			seen.states = s.GetStates()
		}
		f := m.GetFinding()
		if f == nil || ids[f.GetId()] {
			return nil
		}
		ids[f.GetId()] = true
		seen.note(checkEvent{at: time.Since(start), key: bugs.FindingKey(f.GetKind(), f.GetSignature()), part: "explore", detail: f.GetDetail(), finding: f.GetId()})
		return nil
	})
	seen.elapsed = time.Since(start)
	if err != nil && !seen.stopped {
		return nil, err
	}
	return seen, nil
}

// checkEvent is a finding or a clock cell of a check, when it came.
type checkEvent struct {
	at                time.Duration
	key, part, detail string
	finding           string // the finding's id ("" a clock cell)
}

// checkSeen is what observeCheck or observeExplore saw of a run. With
// stopAt, note cancels the run at the first event whose key it takes.
type checkSeen struct {
	events  []checkEvent // first version of each finding, every cell
	states  int64
	elapsed time.Duration
	// start is when the run began; sessions (a check run to its end)
	// every session of each explore part, by part name.
	start    time.Time
	sessions map[string][]string

	stopAt  func(key string) bool // nil: never stop
	cancel  context.CancelFunc
	stopped bool // cancelled by note
}

// note records e and cancels the run if e is the first event stopAt takes.
func (s *checkSeen) note(e checkEvent) {
	s.events = append(s.events, e)
	if s.stopAt != nil && !s.stopped && s.stopAt(e.key) {
		s.stopped = true
		s.cancel()
	}
}

// observeCheck runs a check and records its findings and cells with the
// time each came. A part that failed fails it. With stopAt, the check is
// cancelled at the first finding or cell whose key stopAt takes (the
// summary is then the events so far).
func observeCheck(ctx context.Context, c *conn, req *themisv1.CheckRequest, stopAt func(key string) bool) (*checkSeen, error) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Check(ctx, req)
	if err != nil {
		return nil, err
	}
	seen := &checkSeen{stopAt: stopAt, cancel: cancel, start: start, sessions: map[string][]string{}}
	var sum *themisv1.CheckSummary
	ids := map[string]bool{}
	partStates := map[string]int64{} // the last progress of each part: the states of a check we stopped
	err = client.Drain(stream.Recv, func(m *themisv1.CheckResponse) error {
		at := time.Since(start)
		switch ev := m.GetEvent().(type) {
		case *themisv1.CheckResponse_Finding:
			f := ev.Finding
			if !ids[f.GetId()] {
				ids[f.GetId()] = true
				seen.note(checkEvent{at: at, key: bugs.FindingKey(f.GetKind(), f.GetSignature()), part: m.GetPart(), detail: f.GetDetail(), finding: f.GetId()})
			}
		case *themisv1.CheckResponse_Cell:
			cl := ev.Cell
			seen.note(checkEvent{at: at, key: bugs.CellKey(cl.GetFs(), cl.GetOp(), cl.GetField(), cl.GetVerdict()), part: m.GetPart(), detail: ruleCellDetail(cl)})
		case *themisv1.CheckResponse_Progress:
			partStates[m.GetPart()] = ev.Progress.GetStates()
		case *themisv1.CheckResponse_Summary:
			sum = ev.Summary
		}
		return nil
	})
	seen.elapsed = time.Since(start)
	if seen.stopped {
		for _, n := range partStates {
			seen.states += n
		}
		return seen, nil // cancelled by us: what came before is the result
	}
	if err != nil {
		return nil, err
	}
	if sum == nil {
		return nil, errors.New("check: the daemon ended the stream without a summary")
	}
	for _, p := range sum.GetParts() {
		seen.states += p.GetExplore().GetStates()
		seen.sessions[p.GetName()] = p.GetSessions()
		if p.GetError() != "" {
			return seen, fmt.Errorf("check part %s failed: %s", p.GetName(), p.GetError())
		}
	}
	return seen, nil
}

// outcomeText is a case's outcome in one line.
func outcomeText(o bugs.Outcome) string {
	switch {
	case o.Err != "":
		return "error: " + o.Err
	case o.Detected && o.StockClean != "":
		return fmt.Sprintf("detected in %s by %s (%s, a key of the stock baseline; %s)", o.First.Round(time.Second), o.FirstPart, o.FirstKey, o.StockClean)
	case o.Detected:
		return fmt.Sprintf("detected in %s by %s (%s)", o.First.Round(time.Second), o.FirstPart, o.FirstKey)
	}
	return fmt.Sprintf("missed (%d finding(s), all in the stock baseline; %d states in %s)", o.Findings, o.States, o.Elapsed.Round(time.Second))
}

func printBugsReport(rep *bugsReport) {
	w := newTable()
	fmt.Fprintf(w, "CASE\tCLASS\tFS\tKIND\tRESULT\tTIME\tPART\tREPRODUCED\tFINDINGS\tIN BASELINE\tSTATES\n")
	for _, o := range rep.Outcomes {
		result, at, again := "missed", "-", "-"
		switch {
		case o.Err != "":
			result = "error"
		case o.Detected:
			result, at, again = "detected", o.First.Round(time.Second).String(), "no"
			if o.Reproduced {
				again = "yes"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", o.Case.ID, o.Case.Class, o.Case.FS, o.Case.Kind, result, at, o.FirstPart, again, o.Findings, o.InBaseline, o.States)
	}
	fmt.Fprintf(w, "\ndetected %d of %d cases (budget %s each); %d of the detections reproduced in a fresh session\n", rep.Detected, rep.Cases, rep.Budget, rep.Reproduced)
	printVersus(w, rep)
	fmt.Fprintf(w, "CLASS\tCASES\tDETECTED\tMEDIAN TIME TO DETECT\n")
	for _, m := range rep.Medians {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", m.Class, m.Cases, m.Detected, m.Median.Round(time.Second))
	}
	fmt.Fprintf(w, "\nSTOCK\tIMAGE\tFINDINGS\tKEYS\n")
	for _, b := range rep.Baselines {
		keys := strings.Join(b.Keys, "; ")
		if b.Err != "" {
			keys = "error: " + b.Err
		}
		if b.From != "" {
			keys += " (from " + b.From + ")"
		}
		fmt.Fprintf(w, "%s/%s\t%.12s\t%d\t%s\n", b.FS, b.Flavor, b.Image, b.Findings, keys)
	}
	w.Flush()
	for _, o := range rep.Outcomes {
		if o.Err != "" {
			fmt.Fprintf(os.Stdout, "%s: %s\n", o.Case.ID, o.Err)
		}
		if o.StockClean != "" {
			fmt.Fprintf(os.Stdout, "%s: detected by a finding whose key the stock baseline holds: %s\n", o.Case.ID, o.StockClean)
		}
		if o.Detected && !o.Reproduced {
			fmt.Fprintf(os.Stdout, "%s: not reproduced: %s\n", o.Case.ID, o.Repro)
		}
	}
}

var bugsPage = template.Must(template.New("bugs").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string { return d.Round(time.Second).String() },
	"versus": func(r *bugsReport) bool {
		return slices.ContainsFunc(r.Outcomes, func(o bugs.Outcome) bool { return o.Explore != nil })
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>themis bench bugs</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}.detected{background:#dfd}.missed{background:#fdd}.error{background:#fec}</style></head>
<body><h1>Bug corpus: {{.Detected}} of {{.Cases}} detected, {{.Reproduced}} reproduced</h1>
<p>The same default <code>themisctl check</code> on every case, budget {{dur .Budget}} each, started {{.Started.Format "2006-01-02 15:04"}}, {{dur .Elapsed}} in all. A finding the stock image shows too is not a detection: its key is in the stock baseline, unless its own trace run on the stock image keeps what it lost.</p>
<table id="cases"><tr><th>case</th><th>class</th><th>fs</th><th>kind</th><th>result</th><th>time to detect</th><th>part</th><th>first finding</th><th>reproduced in a fresh session</th><th>findings</th><th>in baseline</th><th>states</th></tr>
{{range .Outcomes}}<tr class="{{if .Err}}error{{else if .Detected}}detected{{else}}missed{{end}}"><td>{{.Case.ID}}</td><td>{{.Case.Class}}</td><td>{{.Case.FS}}</td><td>{{.Case.Kind}}</td><td>{{if .Err}}error: {{.Err}}{{else if .Detected}}detected{{else}}missed{{end}}</td><td>{{if .Detected}}{{dur .First}}{{end}}</td><td>{{.FirstPart}}</td><td>{{.FirstDetail}}{{if .StockClean}}<br>(its key is in the stock baseline; {{.StockClean}}){{end}}</td><td>{{if .Detected}}{{if .Reproduced}}yes{{else}}no{{end}}: {{.Repro}}{{end}}</td><td>{{.Findings}}</td><td>{{.InBaseline}}</td><td>{{.States}}</td></tr>
{{end}}</table>
<h2>By class</h2><table id="classes"><tr><th>class</th><th>cases</th><th>detected</th><th>median time to detect</th></tr>
{{range .Medians}}<tr><td>{{.Class}}</td><td>{{.Cases}}</td><td>{{.Detected}}</td><td>{{dur .Median}}</td></tr>{{end}}</table>
{{if versus .}}<h2>Plain explore, side by side</h2><table id="versus"><tr><th>case</th><th>check</th><th>command</th><th>plain explore</th><th>how far</th></tr>
{{range .Outcomes}}{{$o := .}}{{with .Explore}}<tr><td>{{$o.Case.ID}}</td><td>{{if $o.Detected}}{{dur $o.First}}{{else}}missed{{end}}</td><td>{{.Command}}</td><td>{{if .Err}}error: {{.Err}}{{else if .Detected}}{{dur .First}}{{else}}missed{{end}}</td><td>{{.States}} states in {{dur .Elapsed}}</td></tr>{{end}}{{end}}</table>{{end}}
<h2>Stock baselines</h2><table id="stock"><tr><th>fs</th><th>flavour</th><th>image</th><th>findings</th><th>keys</th></tr>
{{range .Baselines}}<tr><td>{{.FS}}</td><td>{{.Flavor}}</td><td>{{.Image}}</td><td>{{.Findings}}</td><td>{{if .Err}}error: {{.Err}}{{else}}{{range .Keys}}{{.}}<br>{{end}}{{end}}{{if .From}}(from {{.From}}){{end}}</td></tr>{{end}}</table>
</body></html>
`))

// writeBugsReport writes the report as one self-contained HTML page, or
// as --json prints it to a path ending in .json.
func writeBugsReport(path string, rep *bugsReport) error {
	if strings.HasSuffix(path, ".json") {
		b, err := protoJSON(rep.proto(), true)
		if err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := bugsPage.Execute(f, rep); err != nil {
		return errors.Join(fmt.Errorf("--report: %w", err), f.Close())
	}
	return f.Close()
}

// printVersus prints plain explore's detections beside check's, when run.
func printVersus(w io.Writer, rep *bugsReport) {
	n, detected := 0, 0
	for _, o := range rep.Outcomes {
		if o.Explore == nil {
			continue
		}
		n++
		at := fmt.Sprintf("missed (%d states in %s)", o.Explore.States, o.Explore.Elapsed.Round(time.Second))
		if o.Explore.Detected {
			detected++
			at = o.Explore.First.Round(time.Second).String()
		}
		if o.Explore.Err != "" {
			at = "error: " + o.Explore.Err
		}
		fmt.Fprintf(w, "versus\t%s\t%s\t%s\n", o.Case.ID, o.Explore.Command, at)
	}
	if n > 0 {
		fmt.Fprintf(w, "plain explore detected %d of %d\n", detected, n)
	}
}
