package clock

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/themisfs/themis/internal/kreport"
)

// Row is one sweep cell as the JSON lines and the CSV of a clock sweep
// carry it (themisctl sweep clock --json / --csv): the lane, the value set,
// the op, and the three views read back (seconds and nanoseconds), with
// the verdict.
type Row struct {
	Lane      string `json:"lane"`
	FS        string `json:"fs"`
	InodeSize int32  `json:"inode_size,omitempty"`
	// Name and Kind are the plan value's; Value, ValueNs the time set.
	Name    string `json:"name"`
	Kind    string `json:"kind,omitempty"`
	Value   int64  `json:"value"`
	ValueNs int64  `json:"value_ns"`
	Op      string `json:"op"`
	Field   string `json:"field"`
	Guest   int64  `json:"guest"`
	GuestNs int64  `json:"guest_ns"`
	// OnDisk, OnDiskNs are nil where the lane has no on-disk view (vfat,
	// or the op was rejected).
	OnDisk         *int64 `json:"on_disk"`
	OnDiskNs       *int64 `json:"on_disk_ns"`
	AfterRemount   int64  `json:"after_remount"`
	AfterRemountNs int64  `json:"after_remount_ns"`
	Errno          int32  `json:"errno,omitempty"`
	Verdict        string `json:"verdict"`
	Expected       string `json:"expected,omitempty"`
	DistinctGuest  int32  `json:"distinct_guest,omitempty"`
	DistinctOnDisk int32  `json:"distinct_on_disk,omitempty"`
	// Kernel is the kernel's report of a cell whose op crashed the
	// guest's kernel (verdict kernel-crash).
	Kernel *kreport.Report `json:"kernel,omitempty"`
}

// CSVHeader names the columns of Row.CSV.
var CSVHeader = []string{"lane", "fs", "inode_size", "name", "kind", "value", "value_ns", "op", "field", "guest", "guest_ns", "on_disk", "on_disk_ns", "after_remount", "after_remount_ns", "errno", "verdict", "expected"}

// CSV returns the row's CSV fields, in CSVHeader's order; a missing
// on-disk view is two empty fields.
func (r Row) CSV() []string {
	od, odn := "", ""
	if r.OnDisk != nil {
		od, odn = strconv.FormatInt(*r.OnDisk, 10), strconv.FormatInt(*r.OnDiskNs, 10)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{r.Lane, r.FS, i(int64(r.InodeSize)), r.Name, r.Kind, i(r.Value), i(r.ValueNs), r.Op, r.Field,
		i(r.Guest), i(r.GuestNs), od, odn, i(r.AfterRemount), i(r.AfterRemountNs), i(int64(r.Errno)), r.Verdict, r.Expected}
}

// key is what makes a cell one: lane, value name, op.
func (r Row) key() string { return r.Lane + "\x00" + r.Name + "\x00" + r.Op }

// maxRowLine bounds one JSON line ReadRows accepts, in bytes.
const maxRowLine = 1 << 20

// ReadRows decodes JSON lines of rows from in, strictly (an unknown field
// is an error), skipping blank lines. Errors name the input as name and,
// for a bad line, its number ("shard0.jsonl:3: ...").
func ReadRows(in io.Reader, name string) ([]Row, error) {
	var rows []Row
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxRowLine)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r Row
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rows, nil
}

// MergeRows joins the rows of sharded sweeps: a cell (same lane, value
// name and op) seen again is dropped (the first is kept), and the rows are
// ordered by lane, then value, then op. The inputs are not modified.
func MergeRows(shards ...[]Row) []Row {
	seen := map[string]bool{}
	var rows []Row
	for _, shard := range shards {
		for _, r := range shard {
			if !seen[r.key()] {
				seen[r.key()] = true
				rows = append(rows, r)
			}
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
	return rows
}
