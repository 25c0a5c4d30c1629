package clock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// Kind says how a Value is applied.
type Kind string

// Value kinds.
const (
	// KindPoint: the op runs once at the value (the default).
	KindPoint Kind = "point"
	// KindRollback: the op runs at the value, then again one second
	// earlier; the later, earlier time is expected to be stored.
	KindRollback Kind = "rollback"
	// KindNear: the op runs at the value, then again 1 ns later; a
	// filesystem that keeps ns tells them apart.
	KindNear Kind = "near"
	// KindProbe: the clock is set once, then Touches rapid touches; the
	// sweep counts distinct stored times (granularity probe).
	KindProbe Kind = "probe"
)

// DefaultTouches is the number of touches of a probe.
const DefaultTouches = 4

// Value is one point of a clock plan.
type Value struct {
	// Name labels the value in results ("2^31", "y2446").
	Name string `json:"name" toml:"name"`
	// Sec and Nsec are the time set.
	Sec  int64 `json:"sec" toml:"sec"`
	Nsec int64 `json:"nsec,omitempty" toml:"nsec,omitempty"`
	// Kind is how the value is applied ("" = KindPoint).
	Kind Kind `json:"kind,omitempty" toml:"kind,omitempty"`
	// Touches is the number of touches of a probe (0 = DefaultTouches).
	Touches int `json:"touches,omitempty" toml:"touches,omitempty"`
}

// Time returns the value as a Timespec.
func (v Value) Time() Timespec { return Timespec{v.Sec, v.Nsec} }

// Steps returns the times an op is run at, in order; the last is the one
// expected to be stored. A probe has one step (the clock is set once).
func (v Value) Steps() []Timespec {
	t := v.Time()
	switch v.Kind {
	case KindRollback:
		return []Timespec{t, {t.Sec - 1, t.Nsec}}
	case KindNear:
		return []Timespec{t, {t.Sec, t.Nsec + 1}}
	}
	return []Timespec{t}
}

// Ops returns which of ops apply to the value: every op for a point; touch
// and utimensat for a rollback (the op is repeated on one file); utimensat
// for near (a clock-driven op cannot hit a nanosecond); touch for a probe.
func (v Value) Ops(ops []string) []string {
	var out []string
	for _, op := range ops {
		switch v.Kind {
		case KindPoint, "":
			out = append(out, op)
		case KindRollback:
			if op == OpTouch || op == OpUtimensat {
				out = append(out, op)
			}
		case KindNear:
			if op == OpUtimensat {
				out = append(out, op)
			}
		case KindProbe:
			if op == OpTouch {
				out = append(out, op)
			}
		}
	}
	return out
}

// Check validates one value.
func (v Value) Check() error {
	if v.Name == "" {
		return errors.New("clock: value without a name")
	}
	switch v.Kind {
	case "", KindPoint, KindRollback, KindProbe:
	case KindNear:
		if v.Nsec+1 >= 1e9 {
			return fmt.Errorf("clock: value %q: near needs nsec < 999999999", v.Name)
		}
	default:
		return fmt.Errorf("clock: value %q: unknown kind %q (point, rollback, near, probe)", v.Name, v.Kind)
	}
	if !v.Time().Valid() {
		return fmt.Errorf("clock: value %q: nsec %d out of 0..999999999", v.Name, v.Nsec)
	}
	if v.Touches < 0 || v.Touches > 100 {
		return fmt.Errorf("clock: value %q: touches %d out of 0..100", v.Name, v.Touches)
	}
	if v.Touches != 0 && v.Kind != KindProbe {
		return fmt.Errorf("clock: value %q: touches is for kind probe", v.Name)
	}
	return nil
}

// Plan is a list of values and, optionally, the ops to run them with.
type Plan struct {
	// Name labels the plan.
	Name string `json:"name,omitempty" toml:"name,omitempty"`
	// Values are swept in order; names are unique.
	Values []Value `json:"values" toml:"values"`
	// Ops, when set, replaces the default ops.
	Ops []string `json:"ops,omitempty" toml:"ops,omitempty"`
}

// Check validates a plan.
func (p Plan) Check() error {
	if len(p.Values) == 0 {
		return errors.New("clock: plan has no values")
	}
	seen := make(map[string]bool, len(p.Values))
	for _, v := range p.Values {
		if err := v.Check(); err != nil {
			return err
		}
		if seen[v.Name] {
			return fmt.Errorf("clock: value name %q given twice", v.Name)
		}
		seen[v.Name] = true
	}
	return CheckOps(p.Ops)
}

// Notable seconds.
const (
	// S32Max and S32Min bound a signed 32-bit second (128-byte ext inodes).
	S32Max int64 = 1<<31 - 1
	S32Min int64 = -1 << 31
	// ExtExtraMax is the last second an ext4 inode with *_extra fields
	// stores: 2^34 - 1 + S32_MIN (EXT4_EXTRA_TIMESTAMP_MAX),
	// 2446-05-10T22:38:55Z.
	ExtExtraMax int64 = 1<<34 - 1 + S32Min
)

func unix(y int, mo time.Month, d, h, mi, s int) int64 {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC).Unix()
}

// DefaultPlan is the adversarial plan: the 32-bit and 34-bit edges, the
// years 2106, 2446 and 2486, negative and pre-1970 times, a rollback, a
// near-equality pair and a granularity probe.
func DefaultPlan() Plan {
	const base = 1_700_000_000 // 2023-11-14T22:13:20Z, representable everywhere
	return Plan{Name: "default", Values: []Value{
		{Name: "0", Sec: 0},
		{Name: "1", Sec: 1},
		{Name: "2^31-1", Sec: S32Max},
		{Name: "2^31", Sec: S32Max + 1},
		{Name: "2^32-1", Sec: 1<<32 - 1},
		{Name: "2^32", Sec: 1 << 32},
		{Name: "2^34", Sec: 1 << 34},
		{Name: "y2106", Sec: unix(2106, 1, 1, 0, 0, 0)},
		{Name: "y2446", Sec: unix(2446, 1, 1, 0, 0, 0)},
		{Name: "ext4-max", Sec: ExtExtraMax},
		{Name: "ext4-max+1", Sec: ExtExtraMax + 1},
		{Name: "y2486", Sec: unix(2486, 1, 1, 0, 0, 0)},
		{Name: "-1", Sec: -1},
		{Name: "-2^31", Sec: S32Min},
		{Name: "1960-01-01", Sec: unix(1960, 1, 1, 0, 0, 0)},
		{Name: "rollback", Sec: base, Kind: KindRollback},
		{Name: "near", Sec: base, Nsec: 500_000_000, Kind: KindNear},
		{Name: "probe", Sec: base, Kind: KindProbe, Touches: DefaultTouches},
	}}
}

// Format is a plan file format.
type Format string

// Plan file formats.
const (
	FormatJSON Format = "json"
	FormatTOML Format = "toml"
)

// FormatOf returns the format of a plan file by its extension.
func FormatOf(name string) (Format, error) {
	switch {
	case strings.HasSuffix(name, ".json"):
		return FormatJSON, nil
	case strings.HasSuffix(name, ".toml"):
		return FormatTOML, nil
	}
	return "", fmt.Errorf("clock: plan file %q: want a .json or .toml name", name)
}

// MaxPlanBytes caps a plan file.
const MaxPlanBytes = 1 << 20

// DecodePlan decodes a plan strictly (unknown fields, trailing data and a
// plan that fails Check are errors).
func DecodePlan(data []byte, f Format) (Plan, error) {
	var p Plan
	if len(data) > MaxPlanBytes {
		return p, fmt.Errorf("clock: plan is %d bytes, over %d", len(data), MaxPlanBytes)
	}
	switch f {
	case FormatJSON:
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return Plan{}, fmt.Errorf("clock: plan (json): %w", err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return Plan{}, errors.New("clock: plan (json): data after the plan object")
		}
	case FormatTOML:
		dec := toml.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			var sm *toml.StrictMissingError
			if errors.As(err, &sm) {
				return Plan{}, fmt.Errorf("clock: plan (toml): %s", sm.String())
			}
			return Plan{}, fmt.Errorf("clock: plan (toml): %w", err)
		}
	default:
		return Plan{}, fmt.Errorf("clock: unknown plan format %q", f)
	}
	if err := p.Check(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// ParseShard parses "i/n" (0 <= i < n, as JOB_COMPLETION_INDEX counts).
func ParseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("clock: shard %q: want i/n, e.g. 0/3", s)
	}
	if err := CheckShard(i, n); err != nil {
		return 0, 0, err
	}
	return i, n, nil
}

// CheckShard validates shard i of n.
func CheckShard(i, n int) error {
	if n < 1 || i < 0 || i >= n {
		return fmt.Errorf("clock: shard %d/%d: want 0 <= i < n", i, n)
	}
	return nil
}

// Shard returns shard i of n of p: the values whose index is i modulo n, in
// plan order. The shards of one plan are disjoint and cover it; a shard may
// be empty when n exceeds the number of values.
func Shard(p Plan, i, n int) (Plan, error) {
	if err := CheckShard(i, n); err != nil {
		return Plan{}, err
	}
	out := Plan{Name: fmt.Sprintf("%s[%d/%d]", p.Name, i, n), Ops: p.Ops}
	for k := i; k < len(p.Values); k += n {
		out.Values = append(out.Values, p.Values[k])
	}
	return out, nil
}
