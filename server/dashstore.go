package server

import (
	"context"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/dashboard"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/runreport/runproto"
	"github.com/themisfs/themis/runs/exploration/exploreproto"
	"github.com/themisfs/themis/session"
)

// dashStore is what the dashboard reads: the domain, and a finished
// explore run's page made of the messages GetExploreRun and ListFindings
// give `themisctl report --run` (runproto), so both draw the same page.
type dashStore struct{ Domain }

// RunPage implements dashboard.Store.
func (d dashStore) RunPage(ctx context.Context, id string) (*runreport.Run, error) {
	rec, err := d.ExploreRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	var progress []*themisv1.ExploreProgress
	for _, p := range rec.Progress {
		progress = append(progress, exploreproto.Progress(p))
	}
	var found []*themisv1.Finding
	after := session.PageKey{}
	for len(found) < dashboard.MaxListed {
		page, err := d.FindingsPage(ctx, id, after, 500)
		if err != nil {
			return nil, err
		}
		for i := range page {
			found = append(found, findingProto(&page[i]))
		}
		if len(page) < 500 {
			break
		}
		after = session.PageKey{Created: page[len(page)-1].Created, ID: page[len(page)-1].ID}
	}
	return runproto.Run(exploreproto.Request(&rec.Options), exploreproto.Summary(&rec.Summary), progress, found), nil
}
