package server

import (
	"testing"

	"go.uber.org/zap"

	"github.com/themisfs/themis/session"
)

// statsDomain is a fake domain that counts like *session.Manager.
type statsDomain struct {
	*fakeDomain
	st session.Stats
}

func (d statsDomain) Stats() session.Stats { return d.st }

func TestBudgetGauges(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Domain
		want map[string]float64 // gauge -> value; absent: not registered
	}{
		{"manager", statsDomain{&fakeDomain{}, session.Stats{Running: 2, BudgetUsed: 12345, BudgetLimit: 1 << 30}},
			map[string]float64{"themis_sessions_running": 2, "themis_budget_used_bytes": 12345, "themis_budget_limit_bytes": 1 << 30}},
		{"no stats", &fakeDomain{}, map[string]float64{"themis_sessions_running": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			m.watchSessions(tc.d, zap.NewNop())
			fams, err := m.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, f := range fams {
				if len(f.GetMetric()) == 1 && f.GetMetric()[0].GetGauge() != nil {
					switch f.GetName() {
					case "themis_sessions_running", "themis_budget_used_bytes", "themis_budget_limit_bytes":
						got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("gauges %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
