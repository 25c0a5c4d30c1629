package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/report"
)

// Job is what Collect asks the daemon to run.
type Job struct {
	// Lanes are the lane specs; the profile and the corruption run each
	// boot one guest with all of them.
	Lanes []string
	// Ops are the profile's ops in the short form.
	Ops []string
	// Targets are the corruption targets; empty: the sweep (every class).
	Targets []string
	// MemoryMiB is the guests' RAM.
	MemoryMiB int32
}

// Observer is told how Collect gets on; any hook may be nil.
type Observer struct {
	// Step is called as each of the two runs starts, with what it does.
	Step func(step string)
	// Row and Result are called for every profile row and corruption
	// result as it arrives.
	Row    func(*themisv1.ProfileRow)
	Result func(*themisv1.CorruptResult)
}

// Collect runs the profile and then the corruption job on the daemon and
// returns their results as a Report, with a Note on what ran (sessions,
// times); the caller may add to the Note.
func Collect(ctx context.Context, c themisv1.ThemisClient, job Job, obs Observer) (*report.Report, error) {
	r := &report.Report{}
	psum, err := collectProfile(ctx, c, job, obs, r)
	if err != nil {
		return nil, err
	}
	csum, err := collectBlast(ctx, c, job, obs, r)
	if err != nil {
		return nil, err
	}
	r.Note = fmt.Sprintf("Profile: %d rows in %.0f s (session %s); corruption: %d results in %.0f s (session %s).",
		len(r.Profile), psum.GetElapsedS(), psum.GetSessionId(), len(r.Blast), csum.GetElapsedS(), csum.GetSessionId())
	return r, nil
}

// collectProfile runs the profile into r.Profile and r.Layouts.
func collectProfile(ctx context.Context, c themisv1.ThemisClient, job Job, obs Observer, r *report.Report) (*themisv1.ProfileSummary, error) {
	obs.step(fmt.Sprintf("profiling %d ops on %s (one guest)", len(job.Ops), strings.Join(job.Lanes, ", ")))
	stream, err := c.Profile(ctx, &themisv1.ProfileRequest{Lanes: job.Lanes, Ops: job.Ops, MemoryMib: job.MemoryMiB})
	if err != nil {
		return nil, err
	}
	var sum *themisv1.ProfileSummary
	err = client.Drain(stream.Recv, func(m *themisv1.ProfileResponse) error {
		if row := m.GetRow(); row != nil {
			if obs.Row != nil {
				obs.Row(row)
			}
			r.Profile = append(r.Profile, ProfileRow(row))
		}
		if s := m.GetSummary(); s != nil {
			sum = s
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	if sum == nil {
		return nil, errors.New("profile: the stream ended without a summary")
	}
	for _, l := range sum.GetLayouts() {
		r.Layouts = append(r.Layouts, Layout(l))
	}
	return sum, nil
}

// collectBlast runs the corruption job (the sweep without targets) into
// r.Blast.
func collectBlast(ctx context.Context, c themisv1.ThemisClient, job Job, obs Observer, r *report.Report) (*themisv1.CorruptSummary, error) {
	what := "the sweep (every target class)"
	if len(job.Targets) > 0 {
		what = fmt.Sprintf("%d targets", len(job.Targets))
	}
	obs.step(fmt.Sprintf("corrupting: %s on %s (one guest)", what, strings.Join(job.Lanes, ", ")))
	req := &themisv1.CorruptRequest{Lanes: job.Lanes, Targets: job.Targets, Sweep: len(job.Targets) == 0, MemoryMib: job.MemoryMiB}
	stream, err := c.Corrupt(ctx, req)
	if err != nil {
		return nil, err
	}
	var sum *themisv1.CorruptSummary
	err = client.Drain(stream.Recv, func(m *themisv1.CorruptResponse) error {
		if res := m.GetResult(); res != nil {
			if obs.Result != nil {
				obs.Result(res)
			}
			r.Blast = append(r.Blast, BlastResult(res))
		}
		if s := m.GetSummary(); s != nil {
			sum = s
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	if sum == nil {
		return nil, errors.New("corrupt: the stream ended without a summary")
	}
	return sum, nil
}

func (o Observer) step(s string) {
	if o.Step != nil {
		o.Step(s)
	}
}
