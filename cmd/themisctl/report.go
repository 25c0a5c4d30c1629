package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report"
	"github.com/themisfs/themis/report/ingest"
)

// defaultWriteSizes are the write-amplification curve's sizes.
const defaultWriteSizes = "1,512,4K,16K,64K,256K,1M"

// reportFlags are report's flags.
type reportFlags struct {
	lanes, out, from, sizes string
	runSession              string // --run S: an explore run's page
	footprints              int    // --footprints N, with --run
	metadata                bool
	targets                 []string
	memory                  int32
}

// newReport is `themisctl report`.
func newReport(g *globals) *cobra.Command {
	var o reportFlags
	cmd := &cobra.Command{
		Use:   "report",
		Short: "One self-contained HTML page: the image layout map, the write-amplification curve and the blast-radius table",
		Long: `Run a profile (writes of growing sizes, and the metadata ops of Table 2) and a
corruption sweep on every lane, and write one self-contained HTML page (inline
SVG and CSS, no script, nothing fetched) with:

  - the layout map of each lane's image: the regions parsed from the image, and
    the sectors the profile's writes reached, on one LBA axis;
  - the write-amplification curve: sectors written against bytes requested;
  - the blast-radius table: the class of every corruption target per lane.

Each run boots its own guest; progress goes to stderr. With --json the data
behind the page is printed on stdout too; --from renders saved data without a
guest: a file or a directory of such JSON (the report's own, or the JSON lines
of "themisctl --json profile" and "themisctl --json corrupt"; profile lines
alone give the layout map's written view only).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.out == "" {
				return errors.New("-o: want a file name")
			}
			if o.out == "-" && g.json {
				return errors.New("-o - and --json both write to stdout: pick one")
			}
			if o.runSession != "" {
				return o.renderRun(cmd, g)
			}
			if cmd.Flags().Changed("footprints") {
				return errors.New("--footprints goes with --run")
			}
			if o.from != "" {
				return o.renderSaved(cmd, g)
			}
			return o.run(cmd, g)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.lanes, "fs", "ext2", "ext* lane specs, comma-separated")
	f.StringVarP(&o.out, "output", "o", "report.html", "the HTML file to write (- for stdout)")
	f.StringVar(&o.from, "from", "", "render saved JSON (a file or a directory) instead of running the jobs")
	f.IntVar(&o.footprints, "footprints", defaultFootprints, "with --run: profile the last op of this many findings below the filesystem (each a fresh guest)")
	f.StringVar(&o.runSession, "run", "", "instead: the page of the finished explore run of this session (as explore --report draws it), from the ledger")
	f.StringVar(&o.sizes, "write-sizes", defaultWriteSizes, "the write sizes of the amplification curve, in bytes (K and M suffixes: KiB, MiB)")
	f.BoolVar(&o.metadata, "metadata", true, "also profile the metadata ops of Table 2 (create, mkdir, chmod, chown, link, rename, unlink)")
	f.StringArrayVar(&o.targets, "target", nil, "corruption targets as for corrupt (repeatable; default: the sweep, every class)")
	f.Int32Var(&o.memory, "memory", 128, "guest RAM in MiB")
	return cmd
}

// renderRun is report --run S: the explore run's page (explore --report)
// from what the run kept in the ledger and its findings.
func (o *reportFlags) renderRun(cmd *cobra.Command, g *globals) error {
	for _, f := range []string{"fs", "from", "write-sizes", "metadata", "target", "memory"} {
		if cmd.Flags().Changed(f) {
			return fmt.Errorf("--run draws a finished explore run: --%s does not apply", f)
		}
	}
	if g.json {
		return errors.New("--run writes a page: for the data, themisctl --json findings --session " + o.runSession)
	}
	if err := checkFootprints("footprints", o.footprints); err != nil {
		return err
	}
	return g.withConn(cmd, func(ctx context.Context, c *conn) error {
		rec, err := c.GetExploreRun(ctx, &themisv1.GetExploreRunRequest{SessionId: o.runSession})
		if err != nil {
			return err
		}
		fs, err := listFindings(ctx, c, o.runSession)
		if err != nil {
			return err
		}
		run := &exploreRun{sum: rec.GetSummary(), progress: rec.GetProgress()}
		for _, f := range fs {
			run.found.add(f)
		}
		return writeRunReport(o.out, rec.GetRequest(), run, footprints(ctx, c, rec.GetRequest(), run, o.footprints))
	})
}

// renderSaved is report --from: the page of saved results, no guest.
func (o *reportFlags) renderSaved(cmd *cobra.Command, g *globals) error {
	for _, f := range []string{"fs", "write-sizes", "metadata", "target", "memory"} {
		if cmd.Flags().Changed(f) {
			return fmt.Errorf("--from renders saved results: --%s does not apply", f)
		}
	}
	r, err := loadReport(o.from)
	if err != nil {
		return err
	}
	return writeReport(g, r, o.out)
}

// run is report without --from: the jobs on the daemon, then the page.
func (o *reportFlags) run(cmd *cobra.Command, g *globals) error {
	byteSizes, err := parseSizes(o.sizes)
	if err != nil {
		return err
	}
	ops := make([]string, 0, len(byteSizes)+len(api.DefaultProfileOps))
	for _, n := range byteSizes {
		ops = append(ops, fmt.Sprintf("write f 0 %d 0x55", n))
	}
	if o.metadata {
		for _, op := range api.DefaultProfileOps {
			if !strings.HasPrefix(op, "write ") {
				ops = append(ops, op)
			}
		}
	}
	return g.withConn(cmd, func(ctx context.Context, c *conn) error {
		r, err := runReport(ctx, c, ingest.Job{Lanes: splitList(o.lanes), Ops: ops, Targets: o.targets, MemoryMiB: o.memory})
		if err != nil {
			return err
		}
		r.Note = fmt.Sprintf("themisctl report --fs %s, %s. %s", o.lanes, time.Now().UTC().Format("2006-01-02 15:04 MST"), r.Note)
		return writeReport(g, r, o.out)
	})
}

// parseSizes parses "1,512,4K,1M" into bytes.
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, orig := range splitList(s) {
		p, mult := orig, int64(1)
		switch u := strings.ToUpper(p); {
		case strings.HasSuffix(u, "KIB"), strings.HasSuffix(u, "K"):
			mult, p = 1<<10, strings.TrimRight(p, "KkIiBb")
		case strings.HasSuffix(u, "MIB"), strings.HasSuffix(u, "M"):
			mult, p = 1<<20, strings.TrimRight(p, "MmIiBb")
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n <= 0 || n > (64<<20)/mult {
			return nil, fmt.Errorf("--write-sizes: %q: want a size from 1 byte to 64M", orig)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("--write-sizes: want at least one size")
	}
	return out, nil
}

// runReport runs the profile and the corruption jobs on the daemon,
// showing every row and result on stderr as it comes.
func runReport(ctx context.Context, c *conn, job ingest.Job) (*report.Report, error) {
	return ingest.Collect(ctx, c, job, ingest.Observer{
		Step: progress,
		Row: func(row *themisv1.ProfileRow) {
			fmt.Fprintf(os.Stderr, "    %s  %-26s %6d sectors written\n", row.GetLane(), row.GetOp(), row.GetSectorsWritten())
		},
		Result: func(res *themisv1.CorruptResult) {
			fmt.Fprintf(os.Stderr, "    %s  %-26s %s\n", res.GetLane(), res.GetTarget(), res.GetClass())
		},
	})
}

// writeReport renders r to out (and its data to stdout with --json).
func writeReport(g *globals, r *report.Report, out string) error {
	var page bytes.Buffer
	if err := report.Render(&page, r); err != nil {
		return err
	}
	if out == "-" {
		_, err := os.Stdout.Write(page.Bytes())
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".report-*.html")
	if err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	_, werr := tmp.Write(page.Bytes())
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("-o %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("-o %s: %w", out, err)
	}
	progress(fmt.Sprintf("wrote %s (%d bytes): %d layout maps, %d profile rows, %d corruption results", out, page.Len(), len(r.Layouts), len(r.Profile), len(r.Blast)))
	if g.json {
		return writeProtoJSON(ingest.Page(r))
	}
	return nil
}

// loadReport reads saved results (ingest.Load) for --from.
func loadReport(path string) (*report.Report, error) {
	r, err := ingest.Load(path)
	switch {
	case errors.Is(err, ingest.ErrNoFiles), errors.Is(err, ingest.ErrNoData):
		return nil, fmt.Errorf("--from %w", err)
	case err != nil:
		return nil, fmt.Errorf("--from: %w", err)
	}
	return r, nil
}
