package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report"
	"github.com/themisfs/themis/runs/belowfs"
	"google.golang.org/protobuf/encoding/protojson"
)

// defaultWriteSizes are the write-amplification curve's sizes.
const defaultWriteSizes = "1,512,4K,16K,64K,256K,1M"

// maxReportInput bounds one --from file.
const maxReportInput = 64 << 20

func newReport(g *globals, with func(*cobra.Command, func(context.Context, *conn) error) error) *cobra.Command {
	var lanes, out, from, sizes string
	var metadata bool
	var targets []string
	var memory int32
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
			if out == "" {
				return errors.New("-o: want a file name")
			}
			if out == "-" && g.json {
				return errors.New("-o - and --json both write to stdout: pick one")
			}
			if from != "" {
				for _, f := range []string{"fs", "write-sizes", "metadata", "target", "memory"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--from renders saved results: --%s does not apply", f)
					}
				}
				r, err := loadReport(from)
				if err != nil {
					return err
				}
				return writeReport(g, r, out)
			}
			byteSizes, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			ops := make([]string, 0, len(byteSizes)+len(belowfs.DefaultProfileOps))
			for _, n := range byteSizes {
				ops = append(ops, fmt.Sprintf("write f 0 %d 0x55", n))
			}
			if metadata {
				for _, op := range belowfs.DefaultProfileOps {
					if !strings.HasPrefix(op, "write ") {
						ops = append(ops, op)
					}
				}
			}
			return with(cmd, func(ctx context.Context, c *conn) error {
				r, err := runReport(ctx, c, splitList(lanes), ops, targets, memory)
				if err != nil {
					return err
				}
				r.Note = fmt.Sprintf("themisctl report --fs %s, %s. %s", lanes, time.Now().UTC().Format("2006-01-02 15:04 MST"), r.Note)
				return writeReport(g, r, out)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&lanes, "fs", "ext2", "ext* lane specs, comma-separated")
	f.StringVarP(&out, "output", "o", "report.html", "the HTML file to write (- for stdout)")
	f.StringVar(&from, "from", "", "render saved JSON (a file or a directory) instead of running the jobs")
	f.StringVar(&sizes, "write-sizes", defaultWriteSizes, "the write sizes of the amplification curve, in bytes (K and M suffixes: KiB, MiB)")
	f.BoolVar(&metadata, "metadata", true, "also profile the metadata ops of Table 2 (create, mkdir, chmod, chown, link, rename, unlink)")
	f.StringArrayVar(&targets, "target", nil, "corruption targets as for corrupt (repeatable; default: the sweep, every class)")
	f.Int32Var(&memory, "memory", 128, "guest RAM in MiB")
	return cmd
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

// runReport runs the profile and the corruption jobs on the daemon.
func runReport(ctx context.Context, c *conn, lanes, ops, targets []string, memory int32) (*report.Report, error) {
	r := &report.Report{}
	progress(fmt.Sprintf("profiling %d ops on %s (one guest)", len(ops), strings.Join(lanes, ", ")))
	ps, err := c.Profile(ctx, &themisv1.ProfileRequest{Lanes: lanes, Ops: ops, MemoryMib: memory})
	if err != nil {
		return nil, err
	}
	var psum *themisv1.ProfileSummary
	for {
		m, err := ps.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
		if row := m.GetRow(); row != nil {
			fmt.Fprintf(os.Stderr, "    %s  %-26s %6d sectors written\n", row.GetLane(), row.GetOp(), row.GetSectorsWritten())
			r.Profile = append(r.Profile, fromProfileRow(row))
		}
		if s := m.GetSummary(); s != nil {
			psum = s
		}
	}
	if psum == nil {
		return nil, errors.New("profile: the stream ended without a summary")
	}
	for _, l := range psum.GetLayouts() {
		r.Layouts = append(r.Layouts, fromLayout(l))
	}
	what := "the sweep (every target class)"
	if len(targets) > 0 {
		what = fmt.Sprintf("%d targets", len(targets))
	}
	progress(fmt.Sprintf("corrupting: %s on %s (one guest)", what, strings.Join(lanes, ", ")))
	cs, err := c.Corrupt(ctx, &themisv1.CorruptRequest{Lanes: lanes, Targets: targets, Sweep: len(targets) == 0, MemoryMib: memory})
	if err != nil {
		return nil, err
	}
	var csum *themisv1.CorruptSummary
	for {
		m, err := cs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("corrupt: %w", err)
		}
		if res := m.GetResult(); res != nil {
			fmt.Fprintf(os.Stderr, "    %s  %-26s %s\n", res.GetLane(), res.GetTarget(), res.GetClass())
			r.Blast = append(r.Blast, fromCorrupt(res))
		}
		if s := m.GetSummary(); s != nil {
			csum = s
		}
	}
	if csum == nil {
		return nil, errors.New("corrupt: the stream ended without a summary")
	}
	r.Note = fmt.Sprintf("Profile: %d rows in %.0f s (session %s); corruption: %d results in %.0f s (session %s).",
		len(r.Profile), psum.GetElapsedS(), psum.GetSessionId(), len(r.Blast), csum.GetElapsedS(), csum.GetSessionId())
	return r, nil
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
		return writeJSON(os.Stdout, r)
	}
	return nil
}

func fromRanges(in []*themisv1.LBARange) []report.Range {
	out := make([]report.Range, 0, len(in))
	for _, r := range in {
		out = append(out, report.Range{First: r.GetFirst(), Count: r.GetCount(), Region: r.GetRegion()})
	}
	return out
}

func fromLayout(l *themisv1.LaneLayout) report.Layout {
	return report.Layout{Lane: l.GetLane(), Parsed: fromRanges(l.GetParsed()), Inferred: fromRanges(l.GetInferred())}
}

func fromProfileRow(r *themisv1.ProfileRow) report.ProfileRow {
	return report.ProfileRow{Lane: r.GetLane(), Op: r.GetOp(), Bytes: r.GetBytes(), SectorsWritten: int(r.GetSectorsWritten()),
		Written: fromRanges(r.GetWrittenLbas()), SectorsRead: int(r.GetSectorsRead()), Amplification: r.GetAmplification(), Errno: r.GetErrno()}
}

func fromCorrupt(r *themisv1.CorruptResult) report.BlastResult {
	return report.BlastResult{Lane: r.GetLane(), Target: r.GetTarget(), LBA: r.GetLba(), Offset: int(r.GetOffset()), Bit: int(r.GetBit()),
		Region: r.GetRegion(), Field: r.GetField(), Mounted: r.GetMounted(), MountError: r.GetMountError(), KernelLog: r.GetKernelLog(),
		Affected: r.GetAffected(), ReadErrno: r.GetReadErrno(), FsckClean: r.GetFsckClean(), FsckSummary: r.GetFsckSummary(), Class: r.GetClass()}
}

// loadReport reads saved results from a file or from every *.json and
// *.jsonl file of a directory: the report's own JSON (themisctl --json
// report), and JSON lines of ProfileRow, CorruptResult, or the Profile and
// Corrupt stream messages (as grpcurl prints them).
func loadReport(path string) (*report.Report, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("--from: %w", err)
		}
		files = files[:0]
		for _, e := range ents {
			if e.Type().IsRegular() && (strings.HasSuffix(e.Name(), ".json") || strings.HasSuffix(e.Name(), ".jsonl")) {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("--from %s: no .json or .jsonl files", path)
		}
	}
	r := &report.Report{}
	layouts := map[string]bool{}
	for _, f := range files {
		if err := loadReportFile(f, r, layouts); err != nil {
			return nil, fmt.Errorf("--from: %w", err)
		}
	}
	// Lanes with profile rows but no layout: the written view from the rows.
	var lanes []string
	written := map[string][]report.Range{}
	for _, row := range r.Profile {
		if layouts[row.Lane] {
			continue
		}
		if _, ok := written[row.Lane]; !ok {
			lanes = append(lanes, row.Lane)
		}
		written[row.Lane] = append(written[row.Lane], row.Written...)
	}
	for _, lane := range lanes {
		r.Layouts = append(r.Layouts, report.Layout{Lane: lane, Inferred: unionRanges(written[lane])})
	}
	if len(r.Layouts) == 0 && len(r.Profile) == 0 && len(r.Blast) == 0 {
		return nil, fmt.Errorf("--from %s: no report, profile or corruption data", path)
	}
	return r, nil
}

func loadReportFile(name string, r *report.Report, layouts map[string]bool) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxReportInput))
	un := protojson.UnmarshalOptions{DiscardUnknown: true}
	for i := 1; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: value %d: %w", name, i, err)
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(raw, &keys); err != nil {
			return fmt.Errorf("%s: value %d: want a JSON object: %w", name, i, err)
		}
		has := func(ks ...string) bool {
			for _, k := range ks {
				if _, ok := keys[k]; ok {
					return true
				}
			}
			return false
		}
		bad := func(err error) error { return fmt.Errorf("%s: value %d: %w", name, i, err) }
		switch {
		case has("row", "result", "summary"):
			var p themisv1.ProfileResponse
			var c themisv1.CorruptResponse
			switch {
			case has("row") || has("summary") && bytes.Contains(keys["summary"], []byte(`"layouts"`)):
				if err := un.Unmarshal(raw, &p); err != nil {
					return bad(err)
				}
				if row := p.GetRow(); row != nil {
					r.Profile = append(r.Profile, fromProfileRow(row))
				}
				for _, l := range p.GetSummary().GetLayouts() {
					r.Layouts = append(r.Layouts, fromLayout(l))
					layouts[l.GetLane()] = true
				}
			default:
				if err := un.Unmarshal(raw, &c); err != nil {
					return bad(err)
				}
				if res := c.GetResult(); res != nil {
					r.Blast = append(r.Blast, fromCorrupt(res))
				}
			}
		case has("target"):
			var c themisv1.CorruptResult
			if err := un.Unmarshal(raw, &c); err != nil {
				return bad(err)
			}
			r.Blast = append(r.Blast, fromCorrupt(&c))
		case has("op"):
			var p themisv1.ProfileRow
			if err := un.Unmarshal(raw, &p); err != nil {
				return bad(err)
			}
			r.Profile = append(r.Profile, fromProfileRow(&p))
		case has("layouts", "profile", "blast", "title", "note"):
			var saved report.Report
			d := json.NewDecoder(bytes.NewReader(raw))
			d.DisallowUnknownFields()
			if err := d.Decode(&saved); err != nil {
				return bad(fmt.Errorf("a report's JSON: %w", err))
			}
			if r.Title == "" {
				r.Title = saved.Title
			}
			r.Note = strings.TrimSpace(r.Note + " " + saved.Note)
			for _, l := range saved.Layouts {
				layouts[l.Lane] = true
			}
			r.Layouts = append(r.Layouts, saved.Layouts...)
			r.Profile = append(r.Profile, saved.Profile...)
			r.Blast = append(r.Blast, saved.Blast...)
		default:
			return bad(errors.New("not a report, profile row or corruption result"))
		}
	}
}

// unionRanges merges ranges into sorted, disjoint runs; where ranges of
// different regions overlap, the one starting first keeps the sectors.
func unionRanges(in []report.Range) []report.Range {
	rs := append([]report.Range(nil), in...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].First < rs[j].First })
	var out []report.Range
	for _, r := range rs {
		if r.Count == 0 {
			continue
		}
		if n := len(out); n > 0 {
			last := &out[n-1]
			if r.End() <= last.End() {
				continue // covered
			}
			if r.First <= last.End() && r.Region == last.Region {
				last.Count = r.End() - last.First
				continue
			}
			if r.First < last.End() {
				r.Count, r.First = r.End()-last.End(), last.End()
			}
		}
		out = append(out, r)
	}
	return out
}
