package main

import (
	"fmt"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
)

// findingLanes parses f's lane specs and names their families' lanes.
func findingLanes(f *themisv1.Finding) ([]guest.LaneSpec, []family.Lane, error) {
	specs := make([]guest.LaneSpec, len(f.GetLaneSpecs()))
	fams := make([]family.Lane, len(specs))
	for i, s := range f.GetLaneSpecs() {
		sp, err := guest.ParseLaneSpec(s)
		if err != nil {
			return nil, nil, fmt.Errorf("finding %s: lane %q: %w", f.GetId(), s, err)
		}
		specs[i], fams[i] = sp, family.Lane{Name: sp.Name, FS: sp.FS, Seeded: sp.Seed() != 0}
	}
	return specs, fams, nil
}

// findingJudgement is how f's lanes are compared: under policy, else the
// policy f was judged under, else auto (findings that did not record it).
func findingJudgement(f *themisv1.Finding, policy string) (family.Judgement, error) {
	_, fams, err := findingLanes(f)
	if err != nil {
		return family.Judgement{}, err
	}
	if policy == "" {
		policy = f.GetPolicy()
	}
	if policy == "" {
		policy = family.AutoPolicy
	}
	j, err := family.Judge(fams, policy)
	if err != nil {
		return family.Judgement{}, fmt.Errorf("finding %s: policy: %w", f.GetId(), err)
	}
	return j, nil
}
