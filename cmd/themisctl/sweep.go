package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/opspec"
)

// newSweep is `themisctl sweep`: clock sweeps and merging their shards.
func newSweep(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sweep", Short: "Batch experiments: clock sweeps, and merging sharded results"}
	cmd.AddCommand(newSweepClock(g), newSweepMerge(g))
	return cmd
}

// clockFlags are sweep clock's flags.
type clockFlags struct {
	lanes, values, planFile, shard, csvFile string
	ops                                     []string
	memory                                  int32
	image                                   string
	backend                                 string
}

// newSweepClock is `themisctl sweep clock`.
func newSweepClock(g *globals) *cobra.Command {
	var o clockFlags
	cmd := &cobra.Command{
		Use:   "clock",
		Short: "Sweep the clock: for each lane x value x op, the stored time in the guest, on disk and after remount, with a verdict",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := o.request()
			if err != nil {
				return err
			}
			var sink *csvSink
			if o.csvFile != "" {
				if sink, err = createCSV(o.csvFile); err != nil {
					return err
				}
			}
			err = g.withConn(cmd, func(ctx context.Context, c *conn) error {
				progress("clock sweep on " + o.lanes)
				return runClockSweep(ctx, g, c, req, sink)
			})
			if sink != nil {
				err = errors.Join(err, sink.close())
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.lanes, "fs", "ext2,ext4", "lane specs, comma-separated (ext2 = -I 128, ext4, ext2:inode_size=256, ext4:inode_size=128, vfat)")
	fl.StringVar(&o.values, "values", "", "times to sweep, comma-separated SEC or SEC.NSEC (default: the adversarial plan)")
	fl.StringVar(&o.planFile, "plan", "", "a plan file (.toml or .json)")
	fl.StringSliceVar(&o.ops, "ops", nil, "workload ops (create, write, touch, utimensat, mkdir, rename, chmod, read, setxattr, truncate, dir-entry); default all")
	fl.StringVar(&o.shard, "shard", "", "run shard i/n of the plan (0-based), e.g. 0/3")
	fl.StringVar(&o.csvFile, "csv", "", "also write the cells as CSV to this file")
	fl.Int32Var(&o.memory, "memory", 128, "guest RAM in MiB")
	addImageFlag(fl, &o.image)
	fl.StringVar(&o.backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")
	return cmd
}

// request is the ClockSweep request the flags ask for.
func (o *clockFlags) request() (*themisv1.ClockSweepRequest, error) {
	req := &themisv1.ClockSweepRequest{Lanes: splitList(o.lanes), Ops: o.ops, MemoryMib: o.memory, Backend: o.backend, Image: o.image}
	plan, err := o.plan()
	if err != nil {
		return nil, err
	}
	if plan != nil {
		b, err := json.Marshal(plan)
		if err != nil {
			return nil, fmt.Errorf("encode plan: %w", err)
		}
		req.PlanJson = b
	}
	if o.shard != "" {
		i, n, err := clock.ParseShard(o.shard)
		if err != nil {
			return nil, fmt.Errorf("--shard: %w", err)
		}
		req.Shard, req.Shards = int32(i), int32(n)
	}
	return req, nil
}

// plan is the plan of --plan or --values; nil for the daemon's default.
func (o *clockFlags) plan() (*clock.Plan, error) {
	switch {
	case o.planFile != "" && o.values != "":
		return nil, errors.New("give --plan or --values, not both")
	case o.planFile != "":
		b, err := os.ReadFile(o.planFile)
		if err != nil {
			return nil, fmt.Errorf("--plan: %w", err)
		}
		format, err := clock.FormatOf(o.planFile)
		if err != nil {
			return nil, fmt.Errorf("--plan: %w", err)
		}
		p, err := clock.DecodePlan(b, format)
		if err != nil {
			return nil, fmt.Errorf("--plan %s: %w", o.planFile, err)
		}
		return &p, nil
	case o.values != "":
		p := clock.Plan{Name: "values"}
		for _, v := range splitList(o.values) {
			ts, err := opspec.ParseTime(v)
			if err != nil {
				return nil, fmt.Errorf("--values: %w", err)
			}
			p.Values = append(p.Values, clock.Value{Name: v, Sec: ts.GetSec(), Nsec: ts.GetNsec()})
		}
		return &p, nil
	}
	return nil, nil
}

// csvSink is the --csv file: the header, then a row per cell.
type csvSink struct {
	f *os.File
	w *csv.Writer
}

func createCSV(name string) (*csvSink, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("--csv: %w", err)
	}
	s := &csvSink{f: f, w: csv.NewWriter(f)}
	if err := s.w.Write(clock.CSVHeader); err != nil {
		return nil, errors.Join(fmt.Errorf("--csv: %w", err), f.Close())
	}
	return s, nil
}

func (s *csvSink) write(r clock.Row) error {
	if err := s.w.Write(r.CSV()); err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	return nil
}

// close flushes the rows and closes the file.
func (s *csvSink) close() error {
	s.w.Flush()
	if err := errors.Join(s.w.Error(), s.f.Close()); err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	return nil
}

// runClockSweep streams the sweep: with --json a JSON line per cell on
// stdout (the SweepCell as streamed) and the summary on stderr, else the
// table at the end.
func runClockSweep(ctx context.Context, g *globals, c *conn, req *themisv1.ClockSweepRequest, sink *csvSink) error {
	stream, err := c.ClockSweep(ctx, req)
	if err != nil {
		return err
	}
	var rows []clock.Row
	var sum *themisv1.SweepSummary
	st, start := newStatusLine(), time.Now()
	err = client.Drain(stream.Recv, func(r *themisv1.ClockSweepResponse) error {
		if s := r.GetSummary(); s != nil {
			sum = s
		}
		cell := r.GetCell()
		if cell == nil {
			return nil
		}
		row := rowOf(cell)
		rows = append(rows, row)
		el := time.Since(start)
		st.Update(fmt.Sprintf("clock sweep: %d cells  %.1f cells/s  %s", len(rows), float64(len(rows))/max(el.Seconds(), 1e-3), shortDuration(el)))
		if g.json {
			if err := writeProtoJSONLine(cell); err != nil {
				return fmt.Errorf("write json: %w", err)
			}
		}
		if sink != nil {
			return sink.write(row)
		}
		return nil
	})
	st.Clear()
	if err != nil {
		return err
	}
	if !g.json {
		return printSweep(rows, sum)
	}
	if sum != nil {
		b, err := protoJSON(sum, false)
		if err != nil {
			return fmt.Errorf("encode summary: %w", err)
		}
		fmt.Fprintf(os.Stderr, "summary: %s\n", b)
	}
	return nil
}

// rowOf is a streamed cell as a row.
func rowOf(c *themisv1.SweepCell) clock.Row {
	r := clock.Row{Lane: c.GetLane(), FS: c.GetFs(), InodeSize: c.GetInodeSize(), Name: c.GetName(), Kind: c.GetKind(),
		Value: c.GetValue(), ValueNs: c.GetValueNs(), Op: c.GetOp(), Field: c.GetField(),
		Guest: c.GetGuest().GetSec(), GuestNs: c.GetGuest().GetNsec(),
		AfterRemount: c.GetAfterRemount().GetSec(), AfterRemountNs: c.GetAfterRemount().GetNsec(),
		Errno: c.GetErrno(), Verdict: c.GetVerdict(), Expected: c.GetExpected(),
		DistinctGuest: c.GetDistinctGuest(), DistinctOnDisk: c.GetDistinctOnDisk()}
	if k := c.GetKernel(); k != nil {
		r.Kernel = reportOf(k)
	}
	if od := c.GetOnDisk(); od != nil {
		s, n := od.GetSec(), od.GetNsec()
		r.OnDisk, r.OnDiskNs = &s, &n
	}
	return r
}

// newSweepMerge is `themisctl sweep merge`.
func newSweepMerge(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "merge FILE...",
		Short: "Join JSON-lines results of sharded sweeps (themisctl --json sweep clock --shard i/n) into one, in plan order",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cells, err := mergeFiles(args)
			if err != nil {
				return err
			}
			if !g.json {
				rows := make([]clock.Row, 0, len(cells))
				for _, c := range cells {
					rows = append(rows, rowOf(c))
				}
				return printSweep(rows, nil)
			}
			for _, c := range cells {
				if err := writeProtoJSONLine(c); err != nil {
					return fmt.Errorf("write json: %w", err)
				}
			}
			return nil
		},
	}
}

// mergeFiles reads the JSON-lines files of sharded sweeps (a SweepCell a
// line, as sweep clock --json prints them) and merges them as
// clock.MergeRows does: the first of each cell, in plan order.
func mergeFiles(files []string) ([]*themisv1.SweepCell, error) {
	first := map[[3]string]*themisv1.SweepCell{}
	key := func(lane, name, op string) [3]string { return [3]string{lane, name, op} }
	var shards [][]clock.Row
	for _, name := range files {
		cells, err := readCells(name)
		if err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		var rows []clock.Row
		for _, c := range cells {
			if k := key(c.GetLane(), c.GetName(), c.GetOp()); first[k] == nil {
				first[k] = c
			}
			rows = append(rows, rowOf(c))
		}
		shards = append(shards, rows)
	}
	var out []*themisv1.SweepCell
	for _, r := range clock.MergeRows(shards...) {
		out = append(out, first[key(r.Lane, r.Name, r.Op)])
	}
	return out, nil
}

// maxSweepFile bounds a JSON-lines file mergeFiles reads, in bytes.
const maxSweepFile = 256 << 20

// readCells reads one JSON-lines file of SweepCells, strictly (jsonout).
// An empty file holds none.
func readCells(name string) ([]*themisv1.SweepCell, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSweepFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > maxSweepFile {
		return nil, fmt.Errorf("%s: more than %d bytes", name, maxSweepFile)
	}
	msgs, err := jsonout.DecodeLines(b)
	if errors.Is(err, jsonout.ErrNotJSONLines) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cells := make([]*themisv1.SweepCell, 0, len(msgs))
	for i, m := range msgs {
		c, ok := m.(*themisv1.SweepCell)
		if !ok {
			return nil, fmt.Errorf("%s: document %d is a %s, want a themis.v1.SweepCell", name, i+1, m.ProtoReflect().Descriptor().FullName())
		}
		cells = append(cells, c)
	}
	return cells, nil
}

func printSweep(rows []clock.Row, sum *themisv1.SweepSummary) error {
	w := newTable()
	fmt.Fprintf(w, "LANE\tVALUE\tOP\tFIELD\tGUEST\tON DISK\tAFTER REMOUNT\tVERDICT\n")
	ts := func(s, ns int64) string {
		if ns == 0 {
			return strconv.FormatInt(s, 10)
		}
		return fmt.Sprintf("%d.%09d", s, ns)
	}
	for _, r := range rows {
		od := "-"
		if r.OnDisk != nil {
			od = ts(*r.OnDisk, *r.OnDiskNs)
		}
		verdict := r.Verdict
		if r.Kernel != nil {
			verdict += ": " + r.Kernel.Title // the whole report: --json
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Lane, r.Name, r.Op, r.Field, ts(r.Guest, r.GuestNs), od, ts(r.AfterRemount, r.AfterRemountNs), verdict)
	}
	if sum != nil {
		fmt.Fprintf(w, "\ncells\t%d\telapsed\t%.1f s\t(boot %.1f s)\n", sum.GetCells(), sum.GetElapsedS(), sum.GetBootS())
		if sum.GetDeaths() > 0 {
			fmt.Fprintf(w, "guests lost\t%d\t(sessions %s: each cell that lost one went on in a fresh one)\n", sum.GetDeaths(), strings.Join(sum.GetSessions(), ", "))
		}
		for _, c := range sum.GetContrast() {
			fmt.Fprintf(w, "contrast %s\tset %d stored %d\ttime-excluded fingerprint equal: %v\ttime-included equal: %v\tfirst diff: /%s\n",
				c.GetLane(), c.GetValue(), c.GetStored(), c.GetTimeExcludedEqual(), c.GetTimeIncludedEqual(), c.GetFirstDiff())
		}
	}
	return w.Flush()
}
