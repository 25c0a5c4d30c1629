package clock

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConstants(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		got  int64
		want string
	}{
		{"ExtExtraMax", ExtExtraMax, "2446-05-10T22:38:55Z"},
		{"S32Max", S32Max, "2038-01-19T03:14:07Z"},
		{"S32Min", S32Min, "1901-12-13T20:45:52Z"},
		{"2^32", 1 << 32, "2106-02-07T06:28:16Z"},
		{"VfatMax", VfatMax, "2107-12-31T23:59:58Z"},
	} {
		if got := time.Unix(c.got, 0).UTC().Format(time.RFC3339); got != c.want {
			t.Errorf("%s = %d = %s, want %s", c.name, c.got, got, c.want)
		}
	}
	if ExtExtraMax != 15032385535 {
		t.Errorf("ExtExtraMax = %d", ExtExtraMax)
	}
}

// encodeExtra and decodeExtra mirror the kernel's ext4_encode_extra_time and
// ext4_decode_extra_time (fs/ext4/ext4.h): the model Expect must agree with.
func encodeExtra(sec, nsec int64) (lo int32, extra uint32) {
	return int32(sec), uint32((sec-int64(int32(sec)))>>32)&3 | uint32(nsec)<<2
}

func decodeExtra(lo int32, extra uint32) (sec, nsec int64) {
	return int64(lo) + int64(extra&3)<<32, int64(extra >> 2)
}

func TestExtraRoundTripsExactlyOnTheRange(t *testing.T) {
	t.Parallel()
	r, err := RuleFor(Lane{FS: "ext4", InodeSize: 256}, Mtime)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int64{S32Min, S32Min + 1, -1, 0, S32Max, S32Max + 1, 1 << 32, 1<<33 + 7, ExtExtraMax - 1, ExtExtraMax} {
		lo, ex := encodeExtra(s, 123)
		if gs, gn := decodeExtra(lo, ex); gs != s || gn != 123 {
			t.Errorf("round trip %d: got %d.%d", s, gs, gn)
		}
		if got := r.Store(Timespec{s, 123}); got.Sec != s {
			t.Errorf("Store(%d) = %v: inside the range", s, got)
		}
	}
	// One past the range does not round-trip: that is why the kernel clamps.
	lo, ex := encodeExtra(ExtExtraMax+1, 0)
	if gs, _ := decodeExtra(lo, ex); gs == ExtExtraMax+1 {
		t.Errorf("ExtExtraMax+1 round-trips; the bound is wrong")
	}
}

func TestExpect(t *testing.T) {
	t.Parallel()
	ts := func(s, ns int64) Timespec { return Timespec{s, ns} }
	for _, c := range []struct {
		fs    string
		inode int
		f     Field
		set   Timespec
		want  Timespec
		vd    string
	}{
		{"ext2", 128, Mtime, ts(1<<31, 0), ts(S32Max, 0), "clamped(2147483647)"},
		{"ext2", 0, Mtime, ts(1<<31, 0), ts(S32Max, 0), "clamped(2147483647)"},
		{"ext4", 128, Mtime, ts(1<<32, 0), ts(S32Max, 0), "clamped(2147483647)"},
		{"ext4", 256, Mtime, ts(1<<31, 0), ts(1<<31, 0), "represented"},
		{"ext4", 0, Mtime, ts(1<<31, 5), ts(1<<31, 5), "represented"},
		{"ext2", 256, Mtime, ts(1<<31, 0), ts(1<<31, 0), "represented"},
		{"ext4", 256, Mtime, ts(1<<34, 0), ts(ExtExtraMax, 0), "clamped(15032385535)"},
		{"ext4", 256, Ctime, ts(ExtExtraMax, 9), ts(ExtExtraMax, 0), "clamped(15032385535)"},
		{"ext2", 128, Atime, ts(100, 999), ts(100, 0), "rounded(1s)"},
		{"ext2", 128, Mtime, ts(-1, 0), ts(-1, 0), "represented"},
		{"ext2", 128, Mtime, ts(S32Min-5, 0), ts(S32Min, 0), "clamped(-2147483648)"},
		{"ext4", 256, Mtime, ts(-315619200, 0), ts(-315619200, 0), "represented"},
		{"vfat", 0, Mtime, ts(1_700_000_001, 7), ts(1_700_000_000, 0), "rounded(2s)"},
		{"vfat", 0, Ctime, ts(1_700_000_001, 123456789), ts(1_700_000_001, 120000000), "rounded(10ms)"},
		{"vfat", 0, Atime, ts(1_700_000_001, 0), ts(1_699_920_000, 0), "rounded(24h0m0s)"},
		{"vfat", 0, Mtime, ts(0, 0), ts(VfatMin, 0), "clamped(315532800)"},
		{"vfat", 0, Mtime, ts(1<<32, 0), ts(1<<32, 0), "represented"},
		{"vfat", 0, Mtime, ts(1<<34, 0), ts(VfatMax, 0), "clamped(4354819198)"},
		{"exfat", 0, Mtime, ts(1_700_000_001, 123456789), ts(1_700_000_001, 120000000), "rounded(10ms)"},
		{"exfat", 0, Atime, ts(1_700_000_001, 7), ts(1_700_000_000, 0), "rounded(2s)"},
		{"exfat", 0, Mtime, ts(1<<34, 0), ts(ExfatMax, 0), "clamped(4354819199)"},
		{"exfat", 0, Ctime, ts(-1, 0), ts(VfatMin, 0), "clamped(315532800)"},
		{"xfs", 0, Mtime, ts(1<<31, 5), ts(1<<31, 5), "represented"},
		{"xfs", 0, Mtime, ts(1<<34, 5), ts(XfsBigtimeMax, 0), "clamped(16299260424)"},
		{"xfs", 0, Mtime, ts(S32Min-1, 0), ts(S32Min, 0), "clamped(-2147483648)"},
		{"xfs:bigtime=0", 0, Mtime, ts(1<<31, 5), ts(S32Max, 0), "clamped(2147483647)"},
		{"xfs:bigtime=0", 0, Atime, ts(-1, 5), ts(-1, 5), "represented"},
		{"btrfs", 0, Mtime, ts(1<<34, 5), ts(1<<34, 5), "represented"},
		{"btrfs", 0, Ctime, ts(-1<<40, 0), ts(-1<<40, 0), "represented"},
		{"udf", 0, Mtime, ts(1<<34, 123456789), ts(1<<34, 123456000), "rounded(1µs)"},
		{"udf", 0, Atime, ts(S32Min, 0), ts(S32Min, 0), "represented"},
	} {
		l := Lane{FS: c.fs, InodeSize: c.inode}
		if fs, ok := strings.CutSuffix(c.fs, ":bigtime=0"); ok {
			l = Lane{FS: fs, Options: map[string]string{"bigtime": "0"}}
		}
		e, err := Expect(l, c.f, c.set)
		if err != nil {
			t.Fatal(err)
		}
		if e.Stored != c.want || e.Verdict.String() != c.vd {
			t.Errorf("Expect(%s, %d, %s, %v) = %v %s, want %v %s", c.fs, c.inode, c.f, c.set, e.Stored, e.Verdict, c.want, c.vd)
		}
	}
	if _, err := Expect(Lane{FS: "ntfs"}, Mtime, Timespec{}); err == nil {
		t.Error("Expect(ntfs): no error")
	}
	if XfsBigtimeMax != 16299260424 {
		t.Errorf("XfsBigtimeMax = %d, want 16299260424 (2486-07-02, as the guest kernel stores it)", XfsBigtimeMax)
	}
}

// TestUnstoredUntouched: the ctime rules of exFAT, FAT and minix predict
// unstored and untouched cells, and Explain names such a divergence.
func TestUnstoredUntouched(t *testing.T) {
	t.Parallel()
	steps := []Timespec{{Sec: 1 << 31}}
	for _, tc := range []struct {
		fs, op, want string
	}{
		{"exfat", OpChmod, "unstored"}, {"exfat", OpRename, "untouched"}, {"vfat", OpChmod, "untouched"},
		{"vfat", OpRename, "untouched"}, {"minix", OpRename, "untouched"}, {"minix", OpChmod, "represented"},
		{"ext4", OpRename, "represented"}, {"exfat", OpTouch, "represented"},
		{"nilfs2", OpRead, "untouched"}, {"nilfs2", OpTouch, "represented"}, {"f2fs", OpRead, "represented"},
	} {
		e, err := ExpectCell(Lane{FS: tc.fs}, tc.op, steps)
		if err != nil || e.Verdict.String() != tc.want {
			t.Errorf("%s %s: expected %s, %v; want %s", tc.fs, tc.op, e.Verdict, err, tc.want)
		}
	}
	r, err := RuleFor(Lane{FS: "exfat"}, Ctime)
	if err != nil {
		t.Fatal(err)
	}
	set, prep := Timespec{Sec: 1 << 31}, Timespec{Sec: 1_796_000_000, Nsec: 630_000_000}
	div := Verdict{Kind: Diverged, Detail: "x"}
	for _, tc := range []struct {
		name           string
		op             string
		guest, remount Timespec
		want           VerdictKind
	}{
		{"chmod kept in memory, lost at remount", OpChmod, set, prep, Unstored},
		{"rename never set it", OpRename, prep, prep, Untouched},
		{"rename set it after all", OpRename, set, set, Diverged},
		{"chmod lost in memory too", OpChmod, prep, prep, Diverged},
	} {
		if got := r.Explain(tc.op, div, set, tc.guest, tc.remount); got.Kind != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if got := r.Explain(OpChmod, Verdict{Kind: Clamped, ClampedTo: 1}, set, set, prep); got.Kind != Clamped {
		t.Errorf("a clamp explained away: %s", got)
	}
	// nilfs2's atime: a read leaves it, and a remount reads back another
	// (no atime on disk).
	n, err := RuleFor(Lane{FS: "nilfs2"}, Atime)
	if err != nil {
		t.Fatal(err)
	}
	later := Timespec{Sec: prep.Sec, Nsec: prep.Nsec + 12_000_000}
	if got := n.Explain(OpRead, div, set, prep, later); got.Kind != Untouched {
		t.Errorf("nilfs2 read, atime left and not stored: %s, want untouched", got)
	}
	if got := n.Explain(OpRead, div, set, set, later); got.Kind != Unstored {
		t.Errorf("nilfs2 read that did set the atime: %s, want unstored", got)
	}
}

func TestPrefer(t *testing.T) {
	t.Parallel()
	set, got := Timespec{Sec: 10, Nsec: 500_001_234}, Timespec{Sec: 10, Nsec: 500_000_000}
	v := Verdict{Kind: Rounded, Granularity: 10 * time.Millisecond}
	if p := v.Prefer(time.Microsecond, set, got); p.Granularity != 10*time.Millisecond {
		t.Errorf("1 µs keeps .500001234 as .500001, not .5: want 10ms kept, got %s", p)
	}
	set = Timespec{Sec: 10, Nsec: 500_000_000}
	v = Verdict{Kind: Rounded, Granularity: 10 * time.Millisecond}
	if p := v.Prefer(time.Microsecond, Timespec{Sec: 10, Nsec: 500_000_900}, got); p.Granularity != time.Microsecond {
		t.Errorf("both truncate .500000900 to .5: want the rule's 1µs, got %s", p)
	}
	if p := (Verdict{Kind: Clamped, ClampedTo: 5}).Prefer(time.Second, set, got); p.Kind != Clamped || p.Granularity != 0 {
		t.Errorf("a clamp changed: %s", p)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	ts := func(s, ns int64) Timespec { return Timespec{s, ns} }
	p := func(t Timespec) *Timespec { return &t }
	for _, c := range []struct {
		name                string
		set, guest, remount Timespec
		disk                *Timespec
		want                string
	}{
		{"represented", ts(1<<31, 0), ts(1<<31, 0), ts(1<<31, 0), p(ts(1<<31, 0)), "represented"},
		{"clamped", ts(1<<31, 0), ts(S32Max, 0), ts(S32Max, 0), p(ts(S32Max, 0)), "clamped(2147483647)"},
		{"clamped without disk view", ts(1<<40, 0), ts(ExtExtraMax, 0), ts(ExtExtraMax, 0), nil, "clamped(15032385535)"},
		{"wrapped 32", ts(1<<31, 0), ts(S32Min, 0), ts(S32Min, 0), nil, "wrapped"},
		{"wrapped 34", ts(1<<34+5, 0), ts(5, 0), ts(5, 0), nil, "wrapped"},
		{"rounded", ts(10, 5), ts(10, 0), ts(10, 0), p(ts(10, 0)), "rounded(1s)"},
		{"lost on remount", ts(1<<31, 0), ts(1<<31, 0), ts(S32Max, 0), nil, "diverged(guest 2147483648, after remount 2147483647)"},
		{"disk differs", ts(1<<31, 0), ts(1<<31, 0), ts(1<<31, 0), p(ts(S32Max, 0)), "diverged(guest 2147483648, on disk 2147483647)"},
		{"unexplained", ts(100, 0), ts(7, 0), ts(7, 0), nil, "diverged(set 100, stored 7)"},
	} {
		if got := Classify(c.set, c.guest, c.disk, c.remount).String(); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	if got := Reject(22).String(); got != "rejected(errno 22)" {
		t.Errorf("Reject: %s", got)
	}
}

func TestDefaultPlan(t *testing.T) {
	t.Parallel()
	p := DefaultPlan()
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"2^31": 1 << 31, "2^31-1": 1<<31 - 1, "2^32": 1 << 32, "2^34": 1 << 34, "-2^31": -1 << 31,
		"0": 0, "1": 1, "-1": -1, "2^32-1": 1<<32 - 1, "ext4-max": 15032385535}
	for _, v := range p.Values {
		if w, ok := want[v.Name]; ok {
			if v.Sec != w {
				t.Errorf("%s = %d, want %d", v.Name, v.Sec, w)
			}
			delete(want, v.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing values: %v", want)
	}
	kinds := map[Kind]bool{}
	for _, v := range p.Values {
		kinds[v.Kind] = true
	}
	for _, k := range []Kind{KindRollback, KindNear, KindProbe} {
		if !kinds[k] {
			t.Errorf("no %s value", k)
		}
	}
}

func TestDecodePlan(t *testing.T) {
	t.Parallel()
	okJSON := `{"name":"y2038","values":[{"name":"2^31","sec":2147483648},{"name":"near","sec":5,"nsec":1,"kind":"near"}],"ops":["touch","utimensat"]}`
	okTOML := "name = \"y2038\"\nops = [\"touch\", \"utimensat\"]\n[[values]]\nname = \"2^31\"\nsec = 2147483648\n[[values]]\nname = \"near\"\nsec = 5\nnsec = 1\nkind = \"near\"\n"
	want := Plan{Name: "y2038", Values: []Value{{Name: "2^31", Sec: 1 << 31}, {Name: "near", Sec: 5, Nsec: 1, Kind: KindNear}}, Ops: []string{"touch", "utimensat"}}
	for _, c := range []struct {
		f    Format
		data string
	}{{FormatJSON, okJSON}, {FormatTOML, okTOML}} {
		got, err := DecodePlan([]byte(c.data), c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.f, err)
		}
		if got.Name != want.Name || !slices.Equal(got.Values, want.Values) || !slices.Equal(got.Ops, want.Ops) {
			t.Errorf("%s: got %+v, want %+v", c.f, got, want)
		}
	}
	for _, c := range []struct {
		name string
		f    Format
		data string
		want string
	}{
		{"unknown field json", FormatJSON, `{"values":[{"name":"a","sec":1,"secs":2}]}`, "unknown field"},
		{"unknown field toml", FormatTOML, "[[values]]\nname = \"a\"\nsecs = 2\n", "secs"},
		{"unknown top-level toml", FormatTOML, "shard = 1\n[[values]]\nname = \"a\"\n", "shard"},
		{"trailing json", FormatJSON, `{"values":[{"name":"a"}]} {}`, "after the plan"},
		{"malformed json", FormatJSON, `{"values":[`, "plan (json)"},
		{"malformed toml", FormatTOML, "values = [", "plan (toml)"},
		{"no values", FormatJSON, `{"name":"x"}`, "no values"},
		{"unknown op", FormatJSON, `{"values":[{"name":"a"}],"ops":["fly"]}`, "unknown op"},
		{"bad nsec", FormatJSON, `{"values":[{"name":"a","nsec":1000000000}]}`, "nsec"},
		{"bad kind", FormatJSON, `{"values":[{"name":"a","kind":"warp"}]}`, "unknown kind"},
		{"duplicate", FormatJSON, `{"values":[{"name":"a"},{"name":"a"}]}`, "twice"},
		{"unnamed", FormatJSON, `{"values":[{"sec":1}]}`, "without a name"},
		{"wrong type", FormatJSON, `{"values":[{"name":"a","sec":"soon"}]}`, "plan (json)"},
		{"format", Format("yaml"), `{}`, "unknown plan format"},
	} {
		if _, err := DecodePlan([]byte(c.data), c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if f, err := FormatOf("plans/y.toml"); err != nil || f != FormatTOML {
		t.Errorf("FormatOf: %v %v", f, err)
	}
	if _, err := FormatOf("plan.yaml"); err == nil {
		t.Error("FormatOf(yaml): no error")
	}
}

func TestShard(t *testing.T) {
	t.Parallel()
	p := DefaultPlan()
	for n := 1; n <= len(p.Values)+2; n++ {
		seen := map[string]int{}
		for i := range n {
			a, err := Shard(p, i, n)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Shard(p, i, n)
			if !slices.Equal(a.Values, b.Values) {
				t.Fatalf("shard %d/%d not deterministic", i, n)
			}
			prev := -1
			for _, v := range a.Values {
				seen[v.Name]++
				k := slices.IndexFunc(p.Values, func(w Value) bool { return w.Name == v.Name })
				if k <= prev {
					t.Errorf("shard %d/%d out of plan order", i, n)
				}
				prev = k
			}
		}
		for _, v := range p.Values {
			if seen[v.Name] != 1 {
				t.Errorf("n=%d: %s in %d shards", n, v.Name, seen[v.Name])
			}
		}
	}
	for _, s := range []string{"4/3", "3/3", "-1/3", "0/0", "1", "a/b", "1/2/3"} {
		if _, _, err := ParseShard(s); err == nil {
			t.Errorf("ParseShard(%q): no error", s)
		}
	}
	if i, n, err := ParseShard("2/3"); err != nil || i != 2 || n != 3 {
		t.Errorf("ParseShard(2/3) = %d %d %v", i, n, err)
	}
	if _, err := Shard(p, 3, 3); err == nil {
		t.Error("Shard(3/3): no error")
	}
}

func TestValueOps(t *testing.T) {
	t.Parallel()
	all := Ops()
	if got := (Value{Kind: KindProbe}).Ops(all); !slices.Equal(got, []string{OpTouch}) {
		t.Errorf("probe ops %v", got)
	}
	if got := (Value{Kind: KindRollback}).Ops(all); !slices.Equal(got, []string{OpTouch, OpUtimensat}) {
		t.Errorf("rollback ops %v", got)
	}
	if got := (Value{}).Ops(all); !slices.Equal(got, all) {
		t.Errorf("point ops %v", got)
	}
	if got := (Value{Sec: 10, Kind: KindRollback}).Steps(); !slices.Equal(got, []Timespec{{10, 0}, {9, 0}}) {
		t.Errorf("rollback steps %v", got)
	}
	if err := CheckOps([]string{"touch", "touch"}); err == nil {
		t.Error("duplicate op accepted")
	}
}

// TestExpectCellClockRefused: a clock-driven op at a time the guest
// kernel's settimeofday refuses (negative, past 2232) is expected
// rejected(errno 22) on every lane; utimensat of the same value is not
// (it sets the field, not the clock).
func TestExpectCellClockRefused(t *testing.T) {
	for _, tc := range []struct {
		fs    string
		op    string
		steps []Timespec
		want  string
	}{
		{"ext4", OpCreate, []Timespec{{Sec: -1}}, "rejected(errno 22)"},
		{"ext2", OpTouch, []Timespec{{Sec: 1 << 34}}, "rejected(errno 22)"},
		{"vfat", OpMkdir, []Timespec{{Sec: SettodSecMax}}, "rejected(errno 22)"},
		{"ext4", OpCreate, []Timespec{{Sec: SettodSecMax - 1}}, "represented"}, // 256-byte inodes reach 2486
		{"ext4", OpTouch, []Timespec{{Sec: 5}, {Sec: -1}}, "rejected(errno 22)"},
		{"ext4", OpUtimensat, []Timespec{{Sec: -1}}, "represented"},
		{"ext2", OpUtimensat, []Timespec{{Sec: 1 << 34}}, "clamped(2147483647)"},
		{"ext4", OpCreate, []Timespec{{Sec: 0}}, "rejected(errno 22)"}, // before the guest's uptime
		{"ext4", OpTouch, []Timespec{{Sec: 1}}, "rejected(errno 22)"},
		{"ext4", OpUtimensat, []Timespec{{Sec: 0}}, "represented"},
		{"xfs", OpTouch, []Timespec{{Sec: SettodSecMin}}, "represented"},
		{"f2fs", OpSetxattr, []Timespec{{Sec: 1 << 31}}, "represented"},
		{"ext2", OpSetxattr, []Timespec{{Sec: 1 << 31}}, "clamped(2147483647)"},
		{"exfat", OpSetxattr, []Timespec{{Sec: 1 << 31}}, "rejected(errno 95)"}, // no xattrs
		{"minix", OpSetxattr, []Timespec{{Sec: 5000}}, "rejected(errno 95)"},
		{"ext4", OpSetxattr, []Timespec{{Sec: -1}}, "rejected(errno 22)"}, // the clock refuses first
		{"ext4", OpTruncate, []Timespec{{Sec: 1 << 31, Nsec: 5}}, "represented"},
		{"ext2", OpTruncate, []Timespec{{Sec: 1 << 31}}, "clamped(2147483647)"},
		{"vfat", OpDirEntry, []Timespec{{Sec: 1796283001, Nsec: 123456789}}, "rounded(2s)"},
		{"minix", OpDirEntry, []Timespec{{Sec: 5000, Nsec: 7}}, "rounded(1s)"},
	} {
		e, err := ExpectCell(Lane{FS: tc.fs}, tc.op, tc.steps)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Verdict.String(); got != tc.want {
			t.Errorf("%s %s %v: expected %s, want %s", tc.fs, tc.op, tc.steps, got, tc.want)
		}
	}
	if _, err := ExpectCell(Lane{FS: "ext4"}, "nope", []Timespec{{}}); err == nil {
		t.Error("an unknown op has an expectation")
	}
	if SettodSecMax != 8277292036 {
		t.Errorf("SettodSecMax %d, want 8277292036 (KTIME_SEC_MAX 9223372036 less 30 years)", SettodSecMax)
	}
}
