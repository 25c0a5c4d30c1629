package clock

import (
	"sort"
	"strconv"

	"github.com/themisfs/themis/internal/kreport"
)

// Row is one sweep cell as the CSV and the table of a clock sweep carry
// it (themisctl sweep clock --csv; --json prints the API's SweepCell): the
// lane, the value set, the op, and the three views read back (seconds and
// nanoseconds), with the verdict.
type Row struct {
	Lane      string
	FS        string
	InodeSize int32
	// Name and Kind are the plan value's; Value, ValueNs the time set.
	Name    string
	Kind    string
	Value   int64
	ValueNs int64
	Op      string
	Field   string
	Guest   int64
	GuestNs int64
	// OnDisk, OnDiskNs are nil where the lane has no on-disk view (vfat,
	// or the op was rejected).
	OnDisk         *int64
	OnDiskNs       *int64
	AfterRemount   int64
	AfterRemountNs int64
	Errno          int32
	Verdict        string
	Expected       string
	DistinctGuest  int32
	DistinctOnDisk int32
	// Kernel is the kernel's report of a cell whose op crashed the
	// guest's kernel (verdict kernel-crash).
	Kernel *kreport.Report
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
