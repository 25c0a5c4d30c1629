package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/bench"
	"github.com/themisfs/themis/clock"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/session"
	"google.golang.org/protobuf/encoding/protojson"
)

// sweepRow is one cell as JSON lines and CSV write it.
type sweepRow struct {
	Lane           string `json:"lane"`
	FS             string `json:"fs"`
	InodeSize      int32  `json:"inode_size,omitempty"`
	Name           string `json:"name"`
	Kind           string `json:"kind,omitempty"`
	Value          int64  `json:"value"`
	ValueNs        int64  `json:"value_ns"`
	Op             string `json:"op"`
	Field          string `json:"field"`
	Guest          int64  `json:"guest"`
	GuestNs        int64  `json:"guest_ns"`
	OnDisk         *int64 `json:"on_disk"`
	OnDiskNs       *int64 `json:"on_disk_ns"`
	AfterRemount   int64  `json:"after_remount"`
	AfterRemountNs int64  `json:"after_remount_ns"`
	Errno          int32  `json:"errno,omitempty"`
	Verdict        string `json:"verdict"`
	Expected       string `json:"expected,omitempty"`
	DistinctGuest  int32  `json:"distinct_guest,omitempty"`
	DistinctOnDisk int32  `json:"distinct_on_disk,omitempty"`
}

var csvHeader = []string{"lane", "fs", "inode_size", "name", "kind", "value", "value_ns", "op", "field", "guest", "guest_ns", "on_disk", "on_disk_ns", "after_remount", "after_remount_ns", "errno", "verdict", "expected"}

func (r sweepRow) csv() []string {
	od, odn := "", ""
	if r.OnDisk != nil {
		od, odn = strconv.FormatInt(*r.OnDisk, 10), strconv.FormatInt(*r.OnDiskNs, 10)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{r.Lane, r.FS, i(int64(r.InodeSize)), r.Name, r.Kind, i(r.Value), i(r.ValueNs), r.Op, r.Field,
		i(r.Guest), i(r.GuestNs), od, odn, i(r.AfterRemount), i(r.AfterRemountNs), i(int64(r.Errno)), r.Verdict, r.Expected}
}

func rowOf(c *themisv1.SweepCell) sweepRow {
	r := sweepRow{Lane: c.GetLane(), FS: c.GetFs(), InodeSize: c.GetInodeSize(), Name: c.GetName(), Kind: c.GetKind(),
		Value: c.GetValue(), ValueNs: c.GetValueNs(), Op: c.GetOp(), Field: c.GetField(),
		Guest: c.GetGuest().GetSec(), GuestNs: c.GetGuest().GetNsec(),
		AfterRemount: c.GetAfterRemount().GetSec(), AfterRemountNs: c.GetAfterRemount().GetNsec(),
		Errno: c.GetErrno(), Verdict: c.GetVerdict(), Expected: c.GetExpected(),
		DistinctGuest: c.GetDistinctGuest(), DistinctOnDisk: c.GetDistinctOnDisk()}
	if od := c.GetOnDisk(); od != nil {
		s, n := od.GetSec(), od.GetNsec()
		r.OnDisk, r.OnDiskNs = &s, &n
	}
	return r
}

func (r sweepRow) key() string { return r.Lane + "\x00" + r.Name + "\x00" + r.Op }

func addSweep(root *cobra.Command, g *globals, with func(*cobra.Command, func(context.Context, *conn) error) error) {
	sweep := &cobra.Command{Use: "sweep", Short: "Batch experiments: clock sweeps, and merging sharded results"}
	var lanes, values, planFile, shard, csvFile string
	var ops []string
	var memory int32
	var backend string
	clockCmd := &cobra.Command{
		Use:   "clock",
		Short: "Sweep the clock: for each lane x value x op, the stored time in the guest, on disk and after remount, with a verdict",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &themisv1.ClockSweepRequest{Lanes: splitList(lanes), Ops: ops, MemoryMib: memory, Backend: backend}
			var plan *clock.Plan
			switch {
			case planFile != "" && values != "":
				return errors.New("give --plan or --values, not both")
			case planFile != "":
				b, err := os.ReadFile(planFile)
				if err != nil {
					return fmt.Errorf("--plan: %w", err)
				}
				format, err := clock.FormatOf(planFile)
				if err != nil {
					return fmt.Errorf("--plan: %w", err)
				}
				p, err := clock.DecodePlan(b, format)
				if err != nil {
					return fmt.Errorf("--plan %s: %w", planFile, err)
				}
				plan = &p
			case values != "":
				p := clock.Plan{Name: "values"}
				for _, v := range splitList(values) {
					ts, err := opspec.ParseTime(v)
					if err != nil {
						return fmt.Errorf("--values: %w", err)
					}
					p.Values = append(p.Values, clock.Value{Name: v, Sec: ts.GetSec(), Nsec: ts.GetNsec()})
				}
				plan = &p
			}
			if plan != nil {
				b, err := json.Marshal(plan)
				if err != nil {
					return fmt.Errorf("encode plan: %w", err)
				}
				req.PlanJson = b
			}
			if shard != "" {
				i, n, err := clock.ParseShard(shard)
				if err != nil {
					return fmt.Errorf("--shard: %w", err)
				}
				req.Shard, req.Shards = int32(i), int32(n)
			}
			var csvW *csv.Writer
			if csvFile != "" {
				f, err := os.Create(csvFile)
				if err != nil {
					return fmt.Errorf("--csv: %w", err)
				}
				defer f.Close()
				csvW = csv.NewWriter(f)
				if err := csvW.Write(csvHeader); err != nil {
					return fmt.Errorf("--csv: %w", err)
				}
			}
			return with(cmd, func(ctx context.Context, c *conn) error {
				progress("clock sweep on " + lanes)
				stream, err := c.ClockSweep(ctx, req)
				if err != nil {
					return err
				}
				var rows []sweepRow
				var sum *themisv1.SweepSummary
				enc := json.NewEncoder(os.Stdout)
				for {
					r, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						return err
					}
					if cell := r.GetCell(); cell != nil {
						row := rowOf(cell)
						rows = append(rows, row)
						if g.json {
							if err := enc.Encode(row); err != nil {
								return fmt.Errorf("write json: %w", err)
							}
						}
						if csvW != nil {
							if err := csvW.Write(row.csv()); err != nil {
								return fmt.Errorf("--csv: %w", err)
							}
						}
					}
					if s := r.GetSummary(); s != nil {
						sum = s
					}
				}
				if csvW != nil {
					csvW.Flush()
					if err := csvW.Error(); err != nil {
						return fmt.Errorf("--csv: %w", err)
					}
				}
				if g.json {
					if sum != nil {
						b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(sum)
						if err != nil {
							return fmt.Errorf("encode summary: %w", err)
						}
						fmt.Fprintf(os.Stderr, "summary: %s\n", b)
					}
					return nil
				}
				return printSweep(rows, sum)
			})
		},
	}
	fl := clockCmd.Flags()
	fl.StringVar(&lanes, "fs", "ext2,ext4", "lane specs, comma-separated (ext2 = -I 128, ext4, ext2:inode_size=256, ext4:inode_size=128, vfat)")
	fl.StringVar(&values, "values", "", "times to sweep, comma-separated SEC or SEC.NSEC (default: the adversarial plan)")
	fl.StringVar(&planFile, "plan", "", "a plan file (.toml or .json)")
	fl.StringSliceVar(&ops, "ops", nil, "workload ops (create, write, touch, utimensat, mkdir, rename, chmod, read); default all")
	fl.StringVar(&shard, "shard", "", "run shard i/n of the plan (0-based), e.g. 0/3")
	fl.StringVar(&csvFile, "csv", "", "also write the cells as CSV to this file")
	fl.Int32Var(&memory, "memory", 128, "guest RAM in MiB")
	fl.StringVar(&backend, "backend", "auto", "auto (kvm on hardware virtualization, else qemu), qemu or kvm")

	merge := &cobra.Command{
		Use:   "merge FILE...",
		Short: "Join JSON-lines results of sharded sweeps (themisctl --json sweep clock --shard i/n) into one, in plan order",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rows, err := mergeRows(args)
			if err != nil {
				return err
			}
			if g.json {
				enc := json.NewEncoder(os.Stdout)
				for _, r := range rows {
					if err := enc.Encode(r); err != nil {
						return fmt.Errorf("write json: %w", err)
					}
				}
				return nil
			}
			return printSweep(rows, nil)
		},
	}
	sweep.AddCommand(clockCmd, merge)

	var bo bench.Options
	var blanes string
	var bseed uint64
	benchCmd := &cobra.Command{Use: "bench", Short: "Measure Themis against baselines, side by side in one run"}
	benchExplore := &cobra.Command{
		Use:   "explore",
		Short: "States/s and the per-state split of an explore run beside the Metis-style in-OS remount baseline (same fs, same image)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cache, err := cacheDir(g)
			if err != nil {
				return err
			}
			bo.Explore.Lanes, bo.Explore.Seed = splitList(blanes), bseed
			bo.Baseline.CacheDir = cache
			state, err := os.MkdirTemp("", "themis-bench-")
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			defer os.RemoveAll(state)
			ctx := cmd.Context()
			m, err := session.Open(ctx, session.Config{StateDir: filepath.Join(state, "state"), CacheDir: cache, Guest: guest.Options{CacheDir: cache, Log: g.log}, Log: g.log})
			if err != nil {
				return err
			}
			progress("baseline (loop-mount, one op, unmount, copy back) and explore, side by side")
			cmp, err := bench.Run(ctx, m, bo)
			if cerr := m.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if g.json {
				return writeJSON(os.Stdout, cmp)
			}
			fmt.Print(cmp.String())
			return nil
		},
	}
	bf := benchExplore.Flags()
	bf.StringVar(&blanes, "fs", "ext2", "lane spec (the baseline uses the first)")
	bf.IntVar(&bo.Explore.Depth, "depth", 2, "explore depth")
	bf.IntVar(&bo.Explore.Branching, "branching", 12, "explore branching")
	bf.IntVar(&bo.Explore.MaxStates, "max-states", 200, "explore state budget")
	bf.Uint64Var(&bseed, "seed", 1, "explore seed")
	bf.IntVar(&bo.Baseline.States, "baseline-states", 100, "baseline states")
	benchCmd.AddCommand(benchExplore, newBenchRestore(g))
	root.AddCommand(sweep, benchCmd)
}

// mergeRows reads JSON-lines files, drops duplicate cells (same lane, value
// name, op) and orders them by lane, value and op.
func mergeRows(files []string) ([]sweepRow, error) {
	seen := map[string]bool{}
	var rows []sweepRow
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		line := 0
		for sc.Scan() {
			line++
			if strings.TrimSpace(sc.Text()) == "" {
				continue
			}
			var r sweepRow
			dec := json.NewDecoder(strings.NewReader(sc.Text()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&r); err != nil {
				f.Close()
				return nil, fmt.Errorf("merge: %s:%d: %w", name, line, err)
			}
			if !seen[r.key()] {
				seen[r.key()] = true
				rows = append(rows, r)
			}
		}
		err = sc.Err()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("merge: %s: %w", name, err)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Lane != rows[j].Lane {
			return rows[i].Lane < rows[j].Lane
		}
		if rows[i].Value != rows[j].Value {
			return rows[i].Value < rows[j].Value
		}
		return rows[i].Op < rows[j].Op
	})
	return rows, nil
}

func printSweep(rows []sweepRow, sum *themisv1.SweepSummary) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
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
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Lane, r.Name, r.Op, r.Field, ts(r.Guest, r.GuestNs), od, ts(r.AfterRemount, r.AfterRemountNs), r.Verdict)
	}
	if sum != nil {
		fmt.Fprintf(w, "\ncells\t%d\telapsed\t%.1f s\t(boot %.1f s)\n", sum.GetCells(), sum.GetElapsedS(), sum.GetBootS())
		for _, c := range sum.GetContrast() {
			fmt.Fprintf(w, "contrast %s\tset %d stored %d\ttime-excluded fingerprint equal: %v\ttime-included equal: %v\tfirst diff: /%s\n",
				c.GetLane(), c.GetValue(), c.GetStored(), c.GetTimeExcludedEqual(), c.GetTimeIncludedEqual(), c.GetFirstDiff())
		}
	}
	return w.Flush()
}
