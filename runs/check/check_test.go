package check

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/runs/clocksweep"
	"github.com/themisfs/themis/session"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		o         Options
		field     string // want a FieldError on it
		reference string
		parts     []string // want these part names, "-" prefixed when skipped
	}{
		{name: "one lane gets a reference", o: Options{Lanes: []string{"exfat"}}, reference: "ext2",
			parts: []string{"clock exfat", "differential exfat,ext2", "reference exfat", "crash exfat"}},
		{name: "ext gets xfs", o: Options{Lanes: []string{"ext4"}}, reference: "xfs",
			parts: []string{"clock ext4", "differential ext4,xfs", "reference ext4", "crash ext4"}},
		{name: "two lanes no reference", o: Options{Lanes: []string{"ext2", "vfat"}},
			parts: []string{"clock ext2,vfat", "differential ext2,vfat", "reference ext2", "reference vfat", "crash ext2", "-crash vfat"}},
		{name: "none", o: Options{Lanes: []string{"udf"}, Reference: NoReference},
			parts: []string{"clock udf", "-differential udf", "reference udf", "-crash udf"}},
		{name: "asked reference", o: Options{Lanes: []string{"udf"}, Reference: "vfat", Kinds: []string{KindDifferential}}, reference: "vfat",
			parts: []string{"differential udf,vfat"}},
		{name: "reference is a lane", o: Options{Lanes: []string{"udf"}, Reference: "udf"}, field: "reference"},
		{name: "bad reference", o: Options{Lanes: []string{"udf"}, Reference: "zfs"}, field: "reference"},
		{name: "bad kind", o: Options{Lanes: []string{"udf"}, Kinds: []string{"fuzz"}}, field: "parts[0]"},
		{name: "short budget", o: Options{Lanes: []string{"udf"}, Budget: time.Second}, field: "budget"},
		{name: "no lanes", o: Options{}, field: "lanes"},
		{name: "deep", o: Options{Lanes: []string{"udf"}, Depth: 11}, field: "depth"},
		{name: "negative depth", o: Options{Lanes: []string{"udf"}, Depth: -1}, field: "depth"},
		{name: "negative workers", o: Options{Lanes: []string{"udf"}, Workers: -1}, field: "workers"},
		{name: "too many workers", o: Options{Lanes: []string{"udf"}, Workers: 65}, field: "workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := validate(&tc.o)
			if tc.field != "" {
				var fe *errkind.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("err %v, want a FieldError on %s", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.reference != tc.reference || (p.reference != "" && p.referenceWhy == "") {
				t.Errorf("reference %q (%q), want %q", p.reference, p.referenceWhy, tc.reference)
			}
			var got []string
			for _, pt := range p.parts {
				n := pt.Name()
				if pt.Skipped != "" {
					n = "-" + n
				}
				got = append(got, n)
			}
			if strings.Join(got, "; ") != strings.Join(tc.parts, "; ") {
				t.Errorf("parts %q, want %q", got, tc.parts)
			}
			if tc.o.Budget != DefaultBudget || tc.o.Depth != DefaultDepth {
				t.Errorf("defaults: budget %s depth %d", tc.o.Budget, tc.o.Depth)
			}
		})
	}
}

func TestShare(t *testing.T) {
	parts := []Part{{Kind: KindClock}, {Kind: KindDifferential, weight: 3}, {Kind: KindReference, weight: 2}, {Kind: KindCrash, weight: 2, Skipped: "no checker"}, {Kind: KindCrash, weight: 2}}
	for _, tc := range []struct {
		name        string
		at          int
		whole, left time.Duration
		slots       int
		running     []time.Duration
		want        time.Duration
	}{
		{name: "clock takes a quarter", at: 0, whole: 8 * time.Minute, left: 8 * time.Minute, slots: 1, want: 2 * time.Minute},
		{name: "clock takes what is left", at: 0, whole: 8 * time.Minute, left: 30 * time.Second, slots: 1, want: 30 * time.Second},
		{name: "clock takes a minute of a short budget", at: 0, whole: 2 * time.Minute, left: 2 * time.Minute, slots: 1, want: time.Minute},
		{name: "differential by weight, skipped parts left out", at: 1, whole: 10 * time.Minute, left: 7 * time.Minute, slots: 1, want: 3 * time.Minute},
		{name: "left over flows on", at: 2, whole: 10 * time.Minute, left: 6 * time.Minute, slots: 1, want: 3 * time.Minute},
		{name: "last takes the rest", at: 4, whole: 10 * time.Minute, left: 90 * time.Second, slots: 1, want: 90 * time.Second},
		{name: "nothing left", at: 1, whole: time.Minute, left: -time.Second, slots: 1, want: 0},
		{name: "side by side: a slot for every part left", at: 1, whole: 10 * time.Minute, left: 10 * time.Minute, slots: 3,
			running: []time.Duration{150 * time.Second}, want: 10 * time.Minute},
		{name: "side by side: fewer slots than parts", at: 1, whole: 10 * time.Minute, left: 10 * time.Minute, slots: 2,
			running: []time.Duration{150 * time.Second}, want: (20*time.Minute - 150*time.Second) * 3 / 7},
		{name: "side by side: the running parts' time is theirs", at: 2, whole: 10 * time.Minute, left: 9 * time.Minute, slots: 2,
			running: []time.Duration{6 * time.Minute}, want: 6 * time.Minute},
		{name: "side by side: never past the end", at: 2, whole: 10 * time.Minute, left: 2 * time.Minute, slots: 8,
			running: []time.Duration{time.Minute, time.Minute, time.Minute, time.Minute, time.Minute, time.Minute, time.Minute}, want: 2 * time.Minute},
	} {
		if got := share(parts[tc.at:], tc.whole, tc.left, tc.slots, tc.running); got != tc.want {
			t.Errorf("%s: share = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestSchedule: no more parts hold a slot than the schedule has, a slot
// given back is taken again, a cancelled wait gives none, and a part's
// budget counts the parts running beside it.
func TestSchedule(t *testing.T) {
	parts := []Part{{Kind: KindDifferential, weight: 3}, {Kind: KindReference, weight: 2}, {Kind: KindCrash, weight: 2}}
	now := time.Now()
	s := newSchedule(2, 10*time.Minute, now.Add(10*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	if !s.take(ctx) || !s.take(ctx) {
		t.Fatal("two slots, two takes: want both")
	}
	if b := s.start(parts, now); b != 10*time.Minute*2*3/7 {
		t.Errorf("first part's budget %s, want its weight's share of two slots' time", b)
	}
	if b := s.start(parts[1:], now); b != (20*time.Minute-20*time.Minute*3/7)*2/4 {
		t.Errorf("second part's budget %s, want its weight's share of what the first leaves", b)
	}
	cancel()
	if s.take(ctx) {
		t.Fatal("no slot free and ctx cancelled: want false")
	}
	s.release(&parts[0])
	if !s.take(context.Background()) {
		t.Fatal("a released slot: want it taken")
	}
	if len(s.running) != 1 {
		t.Errorf("running %d parts after one release, want 1", len(s.running))
	}
}

func TestAgainstRule(t *testing.T) {
	for _, tc := range []struct {
		verdict, expected string
		want              bool
	}{
		{"represented", "represented", false},
		{"rounded(2s)", "rounded(2s)", false},
		{"diverged(guest 1.03, after remount 1.02)", "represented", true},
		{"kernel-crash", "represented", true},
		{"rounded(1s)", "", false}, // a probe: no single value to expect
	} {
		if got := AgainstRule(clocksweep.Cell{Verdict: tc.verdict, Expected: tc.expected}); got != tc.want {
			t.Errorf("AgainstRule(%q, %q) = %v", tc.verdict, tc.expected, got)
		}
	}
}

// TestSignatures: a finding found again by a deeper run is not fresh nor
// counted twice; a finding minimized into a duplicate is not counted.
func TestSignatures(t *testing.T) {
	s := newSignatures()
	steps := []struct {
		f     session.Finding
		fresh bool
	}{
		{session.Finding{ID: "a", Signature: "x"}, true},
		{session.Finding{ID: "b", Signature: "y"}, true},
		{session.Finding{ID: "b", Signature: "y", DuplicateOf: "a"}, true}, // b minimized to a's trace
	}
	for i, st := range steps {
		if got := s.fresh(st.f); got != st.fresh {
			t.Errorf("run 1 step %d: fresh %v", i, got)
		}
	}
	s.endRun()
	if s.count() != 1 {
		t.Errorf("after run 1: %d counted, want 1 (b is a duplicate)", s.count())
	}
	if s.fresh(session.Finding{ID: "c", Signature: "x"}) {
		t.Error("run 2: x found again is fresh")
	}
	if !s.fresh(session.Finding{ID: "d", Kind: "state", Detail: "z"}) {
		t.Error("run 2: a new finding without a signature is not fresh")
	}
	s.endRun()
	if s.count() != 2 {
		t.Errorf("after run 2: %d counted, want 2", s.count())
	}
}

// TestPopulatedRootInPool: the populated root is a valid explore setup
// (Metis kinds) over pool names only (files as files, dirs as dirs), each
// made in a parent made before it, so that the ops explore draws reach it.
func TestPopulatedRootInPool(t *testing.T) {
	files, dirs := explore.DefaultPool.Paths()
	made := map[string]bool{"": true}
	for i, op := range populatedRoot {
		kind := explore.OpKind(op)
		path, pool := op.GetWrite().GetPath(), files
		switch kind {
		case explore.OpMkdir:
			path, pool = op.GetMkdir().GetPath(), dirs
		case explore.OpCreateFile:
			path = op.GetCreate().GetPath()
		case explore.OpWriteFile:
		default:
			t.Errorf("op %d: kind %s, want mkdir, create_file or write_file", i+1, kind)
		}
		parent := ""
		if j := strings.LastIndexByte(path, '/'); j >= 0 {
			parent = path[:j]
		}
		if !slices.Contains(pool, path) || !made[parent] || made[path] {
			t.Errorf("op %d (%s): %q not a new pool path under a directory made before it", i+1, kind, path)
		}
		made[path] = kind == explore.OpMkdir
	}
	if _, err := opspec.ParseTrace(opspec.FormatTrace(populatedRoot)); err != nil {
		t.Errorf("populated root does not round-trip as a trace: %v", err)
	}
}

// TestRootOfPart: the differential starts from the populated tree as
// made (in the page cache); the single-lane parts from the same tree
// synced, so that crash states hold it whole.
func TestRootOfPart(t *testing.T) {
	want := opspec.FormatTrace(populatedRoot)
	for _, tc := range []struct {
		kind   string
		synced bool
	}{{KindDifferential, false}, {KindReference, true}, {KindCrash, true}} {
		got := opspec.FormatTrace(rootOf(tc.kind))
		n := len(want)
		if tc.synced {
			n++
		}
		if len(got) != n || !slices.Equal(got[:len(want)], want) || (tc.synced && got[n-1] != "sync") {
			t.Errorf("%s part's root %q: want the populated tree%s", tc.kind, got, map[bool]string{true: " and a sync"}[tc.synced])
		}
	}
}
