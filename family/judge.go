package family

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/themisfs/themis/oracle"
)

// AutoPolicy is the name of the canonicalization a run picks from its
// lanes (Judge).
const AutoPolicy = "auto"

// Judgement is how a run of some lanes is judged: its canonicalization,
// the errnos its lanes are declared to give, the ops it leaves out, and
// the reasons, for the report.
type Judgement struct {
	Policy oracle.Policy
	// Declared maps lane → op kind → errno of the Tolerated op rules
	// (explore.Config.Declared); nil for a single lane or the exact policy.
	Declared map[string]map[string]int32
	// Excluded are the op kinds left out (Excluded op rules), sorted.
	Excluded []string
	// Reasons say, one a line, which family declared each rule applied.
	Reasons []string
}

// Judge returns the judgement of a run over lanes under the policy named
// policy: AutoPolicy (or "") takes Metis's rules (oracle.MetisParity) and
// every field the lanes' families declare; oracle.Exact turns every
// declared difference off (no canonicalization, no op left out, no errno
// tolerated); another named policy (oracle.PolicyByName) is used as it is,
// with the op rules. A single lane compares with nothing: its families'
// fields and op rules do not apply.
func Judge(lanes []Lane, policy string) (Judgement, error) {
	fams := make([]*Family, len(lanes))
	for i, l := range lanes {
		f, err := Of(l.FS)
		if err != nil {
			return Judgement{}, fmt.Errorf("lane %s: %w", l.Name, err)
		}
		fams[i] = f
	}
	if policy == oracle.Exact.Name {
		return Judgement{Policy: oracle.Exact}, nil
	}
	var j Judgement
	if policy == "" || policy == AutoPolicy {
		j.Policy = oracle.MetisParity
		j.Policy.Name = AutoPolicy
		if len(lanes) > 1 {
			j.Reasons = fieldRules(&j.Policy, lanes, fams)
		}
	} else {
		p, err := oracle.PolicyByName(policy)
		if err != nil {
			return Judgement{}, err
		}
		j.Policy = p
	}
	if len(lanes) > 1 {
		j.Reasons = append(j.Reasons, j.opRules(lanes, fams)...)
	}
	return j, nil
}

// fieldRules sets p's rules for every field a lane's family declares and
// returns the reasons, "<field>: <families> (<why>)".
func fieldRules(p *oracle.Policy, lanes []Lane, fams []*Family) []string {
	by := map[Field][]*Family{}
	why := map[Field]string{}
	var order []Field
	for i, f := range fams {
		for _, r := range f.Fields {
			if !f.declares(r.Field, lanes[i]) || slices.Contains(by[r.Field], f) {
				continue
			}
			if by[r.Field] == nil {
				order = append(order, r.Field)
				why[r.Field] = r.Why
			}
			by[r.Field] = append(by[r.Field], f)
			fieldPolicy(p, r.Field)
		}
	}
	var out []string
	for _, field := range order {
		out = append(out, fmt.Sprintf("%s ignored: %s (%s)", field, names(by[field]), why[field]))
	}
	return out
}

// opRules fills Declared and Excluded from the lanes' op rules and returns
// the reasons.
func (j *Judgement) opRules(lanes []Lane, fams []*Family) []string {
	var out []string
	excluded := map[string][]*Family{}
	for i, f := range fams {
		for _, r := range f.Ops {
			switch r.Effect {
			case Excluded:
				if !slices.Contains(excluded[r.Op], f) {
					excluded[r.Op] = append(excluded[r.Op], f)
				}
			case Tolerated:
				if j.Declared == nil {
					j.Declared = map[string]map[string]int32{}
				}
				if j.Declared[lanes[i].Name] == nil {
					j.Declared[lanes[i].Name] = map[string]int32{}
				}
				j.Declared[lanes[i].Name][r.Op] = r.Errno
			}
		}
	}
	for op := range excluded {
		j.Excluded = append(j.Excluded, op)
	}
	sort.Strings(j.Excluded)
	for _, op := range j.Excluded {
		out = append(out, fmt.Sprintf("%s left out: %s (%s)", op, names(excluded[op]), ruleWhy(excluded[op][0], op)))
	}
	tolerated := map[string][]*Family{}
	var ops []string
	for _, f := range fams {
		for _, r := range f.Ops {
			if r.Effect == Tolerated && !slices.Contains(tolerated[r.Op], f) {
				if tolerated[r.Op] == nil {
					ops = append(ops, r.Op)
				}
				tolerated[r.Op] = append(tolerated[r.Op], f)
			}
		}
	}
	for _, op := range ops {
		out = append(out, fmt.Sprintf("%s errno %d tolerated: %s (%s)", op, ruleErrno(tolerated[op][0], op), names(tolerated[op]), ruleWhy(tolerated[op][0], op)))
	}
	return out
}

func ruleWhy(f *Family, op string) string {
	for _, r := range f.Ops {
		if r.Op == op {
			return r.Why
		}
	}
	return ""
}

func ruleErrno(f *Family, op string) int32 {
	for _, r := range f.Ops {
		if r.Op == op {
			return r.Errno
		}
	}
	return 0
}

// Without returns ops less the kinds in excluded.
func Without(ops, excluded []string) []string {
	var out []string
	for _, op := range ops {
		if !slices.Contains(excluded, op) {
			out = append(out, op)
		}
	}
	return out
}

// String is the judgement for a report: the policy and its reasons.
func (j Judgement) String() string {
	if len(j.Reasons) == 0 {
		return j.Policy.String()
	}
	return j.Policy.String() + "\n  " + strings.Join(j.Reasons, "\n  ")
}
