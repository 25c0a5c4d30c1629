package opspec

import (
	"fmt"
	"strings"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// FormatTrace writes ops in opspec short form (protojson where the short
// form cannot say it exactly).
func FormatTrace(trace []*agentv1.Request) []string {
	out := make([]string, len(trace))
	for i, r := range trace {
		op, err := FromRequest(r)
		if err != nil {
			b, merr := protojson.Marshal(r)
			if merr != nil {
				out[i] = fmt.Sprintf("<unprintable op: %v>", err)
				continue
			}
			out[i] = string(b)
			continue
		}
		out[i] = Format(op)
	}
	return out
}

// ParseTrace reads back what FormatTrace wrote.
func ParseTrace(trace []string) ([]*agentv1.Request, error) {
	out := make([]*agentv1.Request, len(trace))
	for i, s := range trace {
		if strings.HasPrefix(s, "{") {
			r := new(agentv1.Request)
			if err := protojson.Unmarshal([]byte(s), r); err != nil {
				return nil, fmt.Errorf("op %d %q: %w", i+1, s, err)
			}
			out[i] = r
			continue
		}
		r, err := ParseRequest(s)
		if err != nil {
			return nil, fmt.Errorf("op %d %q: %w", i+1, s, err)
		}
		out[i] = r
	}
	return out, nil
}
