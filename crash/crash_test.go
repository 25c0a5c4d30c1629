package crash

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/themisfs/themis/overlay"
)

func randomLog(r *rand.Rand, maxPerEpoch int) []overlay.LogEntry {
	var log []overlay.LogEntry
	for e := range 1 + r.IntN(4) {
		if e > 0 {
			log = append(log, overlay.LogEntry{Flush: true})
		}
		for range r.IntN(maxPerEpoch + 1) {
			log = append(log, overlay.LogEntry{LBA: uint64(r.IntN(64)), Sectors: 1 + r.IntN(8)})
		}
	}
	return log
}

// legal is the model by brute force: every epoch e with every subset of
// its writes, after all the writes of the epochs before it.
func legal(log []overlay.LogEntry) map[string]bool {
	out := map[string]bool{}
	var durable []int
	for _, ws := range Epochs(log) {
		for mask := 0; mask < 1<<len(ws); mask++ {
			keep := slices.Clone(durable)
			for i, w := range ws {
				if mask&(1<<i) != 0 {
					keep = append(keep, w)
				}
			}
			out[fmt.Sprint(keep)] = true
		}
		durable = append(durable, ws...)
	}
	return out
}

// TestEnumerateIsTheModel: unbounded, the states are exactly the model's
// crash states, each once; prefixes come first, one per write plus the
// whole log; every state keeps all the writes before its Flushes-th flush
// and none after the next one.
func TestEnumerateIsTheModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 3))
		log := randomLog(r, MaxMaxSubset)
		states, truncated, err := Enumerate(log, Options{MaxSubset: MaxMaxSubset, MaxStates: MaxMaxStates})
		if err != nil || truncated {
			t.Fatalf("seed %d: %v, truncated %v", seed, err, truncated)
		}
		want := legal(log)
		got := map[string]bool{}
		writes, prefixes := 0, 0
		for _, e := range log {
			if !e.Flush {
				writes++
			}
		}
		epochs := Epochs(log)
		for i, s := range states {
			k := fmt.Sprint(s.Keep)
			if got[k] {
				t.Fatalf("seed %d: state %v twice", seed, s.Keep)
			}
			got[k] = true
			if s.Kind == KindPrefix {
				if i != prefixes {
					t.Fatalf("seed %d: a prefix after a subset", seed)
				}
				prefixes++
			}
			var before, after []int
			for e, ws := range epochs {
				switch {
				case e < s.Flushes:
					before = append(before, ws...)
				case e > s.Flushes:
					after = append(after, ws...)
				}
			}
			for _, w := range before {
				if !slices.Contains(s.Keep, w) {
					t.Fatalf("seed %d: %s lacks durable write %d", seed, s, w)
				}
			}
			for _, w := range after {
				if slices.Contains(s.Keep, w) {
					t.Fatalf("seed %d: %s keeps write %d of a later epoch", seed, s, w)
				}
			}
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d states, the model has %d", seed, len(got), len(want))
		}
		for k := range want {
			if !got[k] {
				t.Fatalf("seed %d: model state %s missing", seed, k)
			}
		}
		if prefixes != writes+1 {
			t.Errorf("seed %d: %d prefixes for %d writes", seed, prefixes, writes)
		}
	}
}

// TestEnumerateBounds: prefixes only with MaxSubset -1, subsets no larger
// than MaxSubset, and MaxStates cuts the list (prefixes kept first) and
// says so.
func TestEnumerateBounds(t *testing.T) {
	t.Parallel()
	log := []overlay.LogEntry{{LBA: 1, Sectors: 1}, {LBA: 2, Sectors: 1}, {Flush: true}, {LBA: 3, Sectors: 1}, {LBA: 4, Sectors: 1}, {LBA: 5, Sectors: 1}, {LBA: 6, Sectors: 1}}
	for _, tt := range []struct {
		o                Options
		n, maxIn         int
		truncated        bool
		lastKind, string string
	}{
		{Options{MaxSubset: -1}, 7, 4, false, KindPrefix, "after 1 flush(es), prefix: in-flight writes 3,4,5,6 of 3,4,5,6"},
		{Options{MaxSubset: 1}, 7 + 1 + 3, 4, false, KindSubset, "after 1 flush(es), subset: in-flight writes 6 of 3,4,5,6"},
		{Options{MaxSubset: 2}, 7 + 1 + 3 + 5, 4, false, KindSubset, "after 1 flush(es), subset: in-flight writes 5,6 of 3,4,5,6"},
		{Options{MaxSubset: 2, MaxStates: 5}, 5, 2, true, KindPrefix, "after 1 flush(es), prefix: in-flight writes 3,4 of 3,4,5,6"},
	} {
		states, truncated, err := Enumerate(log, tt.o)
		if err != nil {
			t.Fatal(err)
		}
		last := states[len(states)-1]
		if len(states) != tt.n || truncated != tt.truncated || last.Kind != tt.lastKind || last.String() != tt.string {
			t.Errorf("%+v: %d states (truncated %v), last %s; want %d (%v), last %s", tt.o, len(states), truncated, last, tt.n, tt.truncated, tt.string)
		}
		for _, s := range states {
			if s.Kind == KindSubset && len(s.InFlight()) > max(tt.o.MaxSubset, 0) {
				t.Errorf("%+v: %s keeps more than %d in-flight writes", tt.o, s, tt.o.MaxSubset)
			}
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{MaxSubset: -2}, "max subset"},
		{Options{MaxSubset: MaxMaxSubset + 1}, "max subset"},
		{Options{MaxStates: -1}, "max states"},
		{Options{MaxStates: MaxMaxStates + 1}, "max states"},
		{Options{}, ""},
	} {
		err := tt.o.Check()
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.o, err, tt.want)
		}
	}
}

// TestStateOfInvertsEnumerate: every enumerated state read back from its
// Keep is itself; keeps outside the model are refused.
func TestStateOfInvertsEnumerate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		log := randomLog(r, 4)
		states, _, err := Enumerate(log, Options{MaxSubset: MaxMaxSubset, MaxStates: MaxMaxStates})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range states {
			got, err := StateOf(log, st.Keep)
			if err != nil {
				t.Fatalf("log %v keep %v: %v", log, st.Keep, err)
			}
			if !slices.Equal(got.Keep, st.Keep) || got.Flushes != st.Flushes || got.Kind != st.Kind || !slices.Equal(got.Epoch, st.Epoch) {
				t.Fatalf("log %v: StateOf(%v) = %+v, enumerated %+v", log, st.Keep, got, st)
			}
		}
	}
	w := overlay.LogEntry{Sectors: 1}
	log := []overlay.LogEntry{w, w, {Flush: true}, w}
	for _, tc := range []struct {
		keep []int
		want string
	}{
		{[]int{5}, "the log has 4 entries"},
		{[]int{2}, "a flush"},
		{[]int{1, 0}, "not ascending"},
		{[]int{0, 3}, "not a crash state"},
	} {
		if _, err := StateOf(log, tc.keep); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("StateOf(%v) = %v, want an error with %q", tc.keep, err, tc.want)
		}
	}
}
