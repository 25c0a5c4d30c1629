package nested

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Paths inside the job disk (the emulated host's root once it chroots).
const (
	PlanFile   = "/plan.json"
	OutDir     = "/out"
	ResultFile = "/out/result.json"
	// MaxPlan bounds the plan the init reads.
	MaxPlan = 1 << 20
	// MaxSteps bounds a plan's steps.
	MaxSteps = 32
)

// Plan is what the emulated host runs, in order, chrooted into the job
// disk. Each step's stdout goes to /out/<name>.out and its stderr to
// /out/<name>.err.
type Plan struct {
	Steps []Step `json:"steps"`
}

// Step is one command.
type Step struct {
	Name    string   `json:"name"` // [a-z0-9-]{1,32}: the output files' names
	Argv    []string `json:"argv"` // absolute path first
	Env     []string `json:"env,omitempty"`
	Dir     string   `json:"dir,omitempty"`     // working directory; default "/"
	Timeout Duration `json:"timeout,omitempty"` // default 10 minutes
	// Echo also copies the step's stdout to the emulated host's console,
	// to watch a long step (the console is a log, not where results come from).
	Echo bool `json:"echo,omitempty"`
}

// Result is what the init writes to /out/result.json.
type Result struct {
	Kernel string       `json:"kernel"` // uname -r of the emulated host
	KVM    string       `json:"kvm"`    // what kvm.HardwareVirtualization said there
	Flags  string       `json:"flags"`  // the first CPU's flags in /proc/cpuinfo there
	Steps  []StepResult `json:"steps"`
}

// StepResult is how one step ended.
type StepResult struct {
	Name     string  `json:"name"`
	ExitCode int     `json:"exit_code"`       // -1 when it did not run or was killed
	Error    string  `json:"error,omitempty"` // why it did not run or end by itself
	Seconds  float64 `json:"seconds"`
}

// Duration is a time.Duration that reads and writes as a string ("90s").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

var stepName = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// DefaultStepTimeout is a step's timeout when it names none.
const DefaultStepTimeout = 10 * time.Minute

// Validate checks a plan, naming the field at fault.
func (p *Plan) Validate() error {
	if len(p.Steps) == 0 || len(p.Steps) > MaxSteps {
		return fmt.Errorf("nested: plan: steps: %d, want 1..%d", len(p.Steps), MaxSteps)
	}
	seen := map[string]bool{}
	for i, s := range p.Steps {
		switch {
		case !stepName.MatchString(s.Name):
			return fmt.Errorf("nested: plan: steps[%d].name %q: want [a-z0-9-]{1,32}", i, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("nested: plan: steps[%d].name %q: used twice", i, s.Name)
		case len(s.Argv) == 0 || len(s.Argv[0]) == 0 || s.Argv[0][0] != '/':
			return fmt.Errorf("nested: plan: steps[%d].argv: want an absolute program path first", i)
		case s.Timeout < 0:
			return fmt.Errorf("nested: plan: steps[%d].timeout: negative", i)
		}
		seen[s.Name] = true
	}
	return nil
}

// ParsePlan decodes and validates a plan.
func ParsePlan(b []byte) (*Plan, error) {
	if len(b) > MaxPlan {
		return nil, fmt.Errorf("nested: plan: %d bytes, at most %d", len(b), MaxPlan)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("nested: plan: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}
