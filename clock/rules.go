package clock

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// VerdictKind is how a stored timestamp relates to the one set.
type VerdictKind string

// Verdict kinds.
const (
	Represented VerdictKind = "represented" // stored exactly
	Clamped     VerdictKind = "clamped"     // stored as the filesystem's bound (Verdict.ClampedTo)
	Wrapped     VerdictKind = "wrapped"     // stored modulo 2^32 (or the epoch width): a silent wrong time
	Rounded     VerdictKind = "rounded"     // truncated to Verdict.Granularity
	Rejected    VerdictKind = "rejected"    // the op or the clock refused the value (Verdict.Errno)
	Unstored    VerdictKind = "unstored"    // the guest shows it until a remount, which reads back another field (the filesystem stores none)
	Untouched   VerdictKind = "untouched"   // the op leaves the field as it was
	Diverged    VerdictKind = "diverged"    // the views disagree, or a change none of the above explains
)

// Verdict classifies one cell.
type Verdict struct {
	Kind VerdictKind `json:"kind"`
	// ClampedTo is the second stored, for Clamped.
	ClampedTo int64 `json:"clamped_to,omitempty"`
	// Granularity is the truncation, for Rounded (0: finer than the
	// clock's tick, e.g. a probe's coarse clock).
	Granularity time.Duration `json:"granularity,omitempty"`
	// Errno is the refusal, for Rejected.
	Errno int32 `json:"errno,omitempty"`
	// Detail says which view disagrees, for Diverged.
	Detail string `json:"detail,omitempty"`
}

// String is the verdict's short form: "represented", "clamped(2147483647)",
// "rounded(1s)", "rejected(errno 22)", "wrapped", "diverged(...)".
func (v Verdict) String() string {
	switch v.Kind {
	case Clamped:
		return fmt.Sprintf("clamped(%d)", v.ClampedTo)
	case Rounded:
		if v.Granularity == 0 {
			return "rounded(clock tick)"
		}
		return fmt.Sprintf("rounded(%s)", v.Granularity)
	case Rejected:
		return fmt.Sprintf("rejected(errno %d)", v.Errno)
	case Diverged:
		return fmt.Sprintf("diverged(%s)", v.Detail)
	}
	return string(v.Kind)
}

// Rule is what a filesystem stores for one timestamp field: the range of
// seconds (the superblock's s_time_min/s_time_max) and the granularity.
type Rule struct {
	Min, Max int64
	// Granularity is the truncation (1 ns: none).
	Granularity time.Duration
	// DateOnly truncates to the day (vfat atime).
	DateOnly bool
	// NotStored: the filesystem has no such field on disk; the guest
	// keeps what was set until a remount reads back another (exFAT's
	// ctime is its mtime, FAT's its creation time).
	NotStored bool
	// UntouchedBy are the ops that leave the field as it was (minix's
	// rename and the ctime).
	UntouchedBy []string
}

// vfat bounds with tz=UTC (the guest's): FAT_DATE_MIN 1980-01-01 and
// FAT_DATE_MAX/FAT_TIME_MAX 2107-12-31 23:59:58.
var (
	VfatMin = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	VfatMax = time.Date(2107, 12, 31, 23, 59, 58, 0, time.UTC).Unix()
)

// Lane is what a lane's timestamp rules depend on: its filesystem, its
// inode size (ext2/3/4; 0 means the lane default: 128 for ext2, 256
// otherwise) and its settings (xfs: bigtime, "1" unless "0").
type Lane struct {
	FS        string
	InodeSize int
	Options   map[string]string
}

// Bounds of the filesystems' timestamp ranges (their superblocks'
// s_time_min and s_time_max in the guest kernel).
var (
	// XfsBigtimeMax is the last second the guest kernel's xfs stores with
	// bigtime (unsigned 64-bit nanoseconds from 1901-12-13), 2486-07-02:
	// one less than the format's last whole second, as measured (a sweep
	// at 2^34 reads back 16299260424).
	XfsBigtimeMax = int64(math.MaxUint64/uint64(time.Second)) + S32Min - 1
	// ExfatMax is 2107-12-31 23:59:59, the last second of exFAT's 7-bit
	// year (from 1980); exFAT's first is VfatMin.
	ExfatMax = time.Date(2107, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)

// RuleFor returns the rule of one field on a lane's filesystem. ext2 lanes
// are mounted by the ext4 driver (Debian's CONFIG_EXT4_USE_FOR_EXT2), so
// ext2 with 256-byte inodes gets the extra fields too.
func RuleFor(l Lane, f Field) (Rule, error) {
	if f != Atime && f != Mtime && f != Ctime {
		return Rule{}, fmt.Errorf("clock: unknown field %q", f)
	}
	switch l.FS {
	case "ext2", "ext3", "ext4":
		inodeSize := l.InodeSize
		if inodeSize == 0 {
			inodeSize = 256
			if l.FS == "ext2" {
				inodeSize = 128
			}
		}
		if inodeSize <= 128 {
			return Rule{Min: S32Min, Max: S32Max, Granularity: time.Second}, nil
		}
		return Rule{Min: S32Min, Max: ExtExtraMax, Granularity: time.Nanosecond}, nil
	case "vfat":
		switch f {
		case Mtime:
			return Rule{Min: VfatMin, Max: VfatMax, Granularity: 2 * time.Second}, nil
		case Ctime:
			// FAT's "ctime" is the creation time: chmod and rename
			// leave it, and nothing else sets it after the create.
			return Rule{Min: VfatMin, Max: VfatMax, Granularity: 10 * time.Millisecond, NotStored: true, UntouchedBy: []string{OpChmod, OpRename}}, nil
		}
		return Rule{Min: VfatMin, Max: VfatMax, Granularity: 24 * time.Hour, DateOnly: true}, nil
	case "exfat":
		r := Rule{Min: VfatMin, Max: ExfatMax, Granularity: 10 * time.Millisecond}
		switch f {
		case Atime:
			r.Granularity = 2 * time.Second
		case Ctime:
			// exFAT stores no change time (an inode's reads back as its
			// mtime), and its rename leaves the in-memory one alone.
			r.NotStored, r.UntouchedBy = true, []string{OpRename}
		}
		return r, nil
	case "xfs":
		if l.Options["bigtime"] == "0" {
			return Rule{Min: S32Min, Max: S32Max, Granularity: time.Nanosecond}, nil
		}
		return Rule{Min: S32Min, Max: XfsBigtimeMax, Granularity: time.Nanosecond}, nil
	case "btrfs", "f2fs":
		return Rule{Min: math.MinInt64, Max: math.MaxInt64, Granularity: time.Nanosecond}, nil
	case "nilfs2":
		// nilfs2's on-disk inode has no atime (a loaded inode's reads
		// back as another time), and a read leaves the in-memory one as
		// it was (measured: docs/filesystems.md).
		r := Rule{Min: math.MinInt64, Max: math.MaxInt64, Granularity: time.Nanosecond}
		if f == Atime {
			r.NotStored, r.UntouchedBy = true, []string{OpRead}
		}
		return r, nil
	case "minix":
		// minix v3 keeps unsigned 32-bit seconds (s_time_min 0,
		// s_time_max U32_MAX); its rename leaves the ctime alone.
		r := Rule{Min: 0, Max: math.MaxUint32, Granularity: time.Second}
		if f == Ctime {
			r.UntouchedBy = []string{OpRename}
		}
		return r, nil
	case "udf":
		// The kernel's udf keeps microseconds and sets no range of its
		// own; its on-disk stamp holds a 16-bit year, so a time past
		// year 65535 (or before year 1) would wrap, which no sweep value
		// reaches.
		return Rule{Min: math.MinInt64, Max: math.MaxInt64, Granularity: time.Microsecond}, nil
	}
	return Rule{}, fmt.Errorf("clock: no timestamp rule for filesystem %q", l.FS)
}

// Store applies the rule as timestamp_truncate does: clamp the seconds
// (nanoseconds zeroed at a bound), then truncate towards minus infinity.
func (r Rule) Store(t Timespec) Timespec {
	switch {
	case t.Sec >= r.Max:
		return Timespec{Sec: r.Max}
	case t.Sec <= r.Min:
		return Timespec{Sec: r.Min}
	}
	g := int64(r.Granularity)
	switch {
	case g <= 1:
		return t
	case g < int64(time.Second):
		return Timespec{t.Sec, t.Nsec - t.Nsec%g}
	}
	gs := g / int64(time.Second)
	return Timespec{Sec: floorDiv(t.Sec, gs) * gs}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Expectation is what a filesystem is expected to store for a value.
type Expectation struct {
	Stored  Timespec
	Verdict Verdict
}

// Expect returns what lane l stores in field f when value is set, and the
// verdict that has.
func Expect(l Lane, f Field, value Timespec) (Expectation, error) {
	r, err := RuleFor(l, f)
	if err != nil {
		return Expectation{}, err
	}
	s := r.Store(value)
	v := classifyOne(value, s)
	if v.Kind == Rounded {
		v.Granularity = r.Granularity
	}
	return Expectation{Stored: s, Verdict: v}, nil
}

// Limits of the guest kernel's settimeofday(2), timespec64_valid_settod in
// include/linux/time64.h: a negative time, nanoseconds outside [0, 1e9)
// and seconds from SettodSecMax on are refused with EINVAL. SettodSecMax
// is KTIME_SEC_MAX (2^63-1 ns in seconds) less 30 years of uptime, in
// 2232: past it CLOCK_REALTIME would overflow. do_settimeofday64 also
// refuses a time earlier than the guest's uptime (the wall clock may not
// go below CLOCK_MONOTONIC); SettodSecMin assumes an uptime under an hour,
// which a sweep's guest, booted for it, keeps (values 0 and 1 are refused,
// as measured).
const (
	ktimeSecMax  = math.MaxInt64 / int64(time.Second)
	SettodSecMax = ktimeSecMax - 30*365*24*3600
	SettodSecMin = 3600
	// errnoEINVAL is what settimeofday refuses with.
	errnoEINVAL = 22
	// errnoEOPNOTSUPP is a setxattr's on a filesystem without xattrs.
	errnoEOPNOTSUPP = 95
)

// noXattrs are the lane filesystems without extended attributes (their
// families' setxattr rule in package family's table).
var noXattrs = []string{"vfat", "exfat", "udf", "minix", "nilfs2"}

// ClockRefuses reports whether the guest kernel refuses to set its clock
// to t.
func ClockRefuses(t Timespec) bool {
	return t.Sec < SettodSecMin || t.Nsec < 0 || t.Nsec >= int64(time.Second) || t.Sec >= SettodSecMax
}

// ExpectCell is Expect for one cell of a sweep: op applied after setting
// the value's steps. A clock-driven op (UsesClock) whose clock the kernel
// refuses to set to a step is expected rejected (EINVAL) on every lane.
func ExpectCell(l Lane, op string, steps []Timespec) (Expectation, error) {
	f, ok := OpField(op)
	if !ok || len(steps) == 0 {
		return Expectation{}, fmt.Errorf("clock: no expectation for op %q with %d steps", op, len(steps))
	}
	if UsesClock(op) && slices.ContainsFunc(steps, ClockRefuses) {
		return Expectation{Verdict: Reject(errnoEINVAL)}, nil
	}
	if op == OpSetxattr && slices.Contains(noXattrs, l.FS) {
		return Expectation{Verdict: Reject(errnoEOPNOTSUPP)}, nil
	}
	r, err := RuleFor(l, f)
	if err != nil {
		return Expectation{}, err
	}
	switch {
	case slices.Contains(r.UntouchedBy, op):
		return Expectation{Verdict: Verdict{Kind: Untouched}}, nil
	case r.NotStored:
		return Expectation{Verdict: Verdict{Kind: Unstored}}, nil
	}
	return Expect(l, f, steps[len(steps)-1])
}

// Bounds are the seconds a clamp lands on, over every rule: upper then lower.
func Bounds() (upper, lower []int64) {
	return []int64{S32Max, ExtExtraMax, VfatMax, ExfatMax, XfsBigtimeMax, math.MaxUint32}, []int64{S32Min, VfatMin, 0}
}

func isUpper(s int64) bool { u, _ := Bounds(); return slices.Contains(u, s) }
func isLower(s int64) bool { _, l := Bounds(); return slices.Contains(l, s) }

// granularities that Classify recognizes, in the order tried: one sample
// cannot tell 1 s from 1 µs when the set time had no µs, so the
// granularities filesystems use come first (ext 128-byte inodes, vfat mtime,
// ctime and atime).
var granularities = []time.Duration{time.Second, 2 * time.Second, 10 * time.Millisecond, 24 * time.Hour,
	time.Millisecond, time.Microsecond}

// classifyOne classifies one stored view against the value set.
func classifyOne(set, got Timespec) Verdict {
	if got == set {
		return Verdict{Kind: Represented}
	}
	if got.Nsec == 0 && ((isUpper(got.Sec) && set.Compare(got) > 0) || (isLower(got.Sec) && set.Sec < got.Sec)) {
		return Verdict{Kind: Clamped, ClampedTo: got.Sec}
	}
	if g := roundedBy(set, got); g != 0 {
		return Verdict{Kind: Rounded, Granularity: g}
	}
	if got.Nsec == set.Nsec || got.Nsec == 0 {
		for _, w := range []uint{32, 34} {
			m := int64(1) << w
			if got.Sec != set.Sec && ((got.Sec-set.Sec)%m+m)%m == 0 {
				return Verdict{Kind: Wrapped}
			}
		}
	}
	return Verdict{Kind: Diverged, Detail: fmt.Sprintf("set %s, stored %s", set, got)}
}

// Compare is a.Compare(b).
func Compare(a, b Timespec) int { return a.Compare(b) }

// roundedBy returns the first granularity g (in the order of granularities)
// such that set truncated to g is got, or 0.
func roundedBy(set, got Timespec) time.Duration {
	for _, g := range granularities {
		if (Rule{Min: -1 << 62, Max: 1 << 62, Granularity: g}).Store(set) == got {
			return g
		}
	}
	return 0
}

// Classify classifies a cell from its views: the guest's stat, the inode on
// disk (nil where there is no on-disk parser, e.g. vfat) and stat after
// umount+mount. Each view is classified against set; if they disagree the
// verdict is Diverged, naming the first view that differs from the guest's.
func Classify(set, guest Timespec, onDisk *Timespec, afterRemount Timespec) Verdict {
	v := classifyOne(set, guest)
	if onDisk != nil && *onDisk != guest {
		return Verdict{Kind: Diverged, Detail: fmt.Sprintf("guest %s, on disk %s", guest, *onDisk)}
	}
	if afterRemount != guest {
		return Verdict{Kind: Diverged, Detail: fmt.Sprintf("guest %s, after remount %s", guest, afterRemount)}
	}
	return v
}

// Prefer names granularity g for a Rounded verdict of set stored as got
// when truncating set to g gives got too: one sample cannot tell 1 µs from
// 10 ms when set has nothing below 10 ms, and the lane's rule says which
// it is. Other verdicts are returned as they are.
func (v Verdict) Prefer(g time.Duration, set, got Timespec) Verdict {
	if v.Kind == Rounded && g > 0 && (Rule{Min: -1 << 62, Max: 1 << 62, Granularity: g}).Store(set) == got {
		v.Granularity = g
	}
	return v
}

// Explain turns a Diverged verdict of op on r's field into what r says of
// it: Untouched when op is among r.UntouchedBy and the guest shows a time
// other than set's that the remount agrees with (or, when r.NotStored,
// need not); Unstored when r.NotStored and
// the guest kept set (as the rule stores it) while the remount read back
// another. Other verdicts are returned as they are.
func (r Rule) Explain(op string, v Verdict, set, guest, remount Timespec) Verdict {
	if v.Kind != Diverged {
		return v
	}
	switch {
	case slices.Contains(r.UntouchedBy, op) && (guest == remount || r.NotStored) && guest != r.Store(set):
		return Verdict{Kind: Untouched}
	case r.NotStored && guest == r.Store(set) && remount != guest:
		return Verdict{Kind: Unstored}
	}
	return v
}

// Reject is the verdict of a refused value.
func Reject(errno int32) Verdict { return Verdict{Kind: Rejected, Errno: errno} }
