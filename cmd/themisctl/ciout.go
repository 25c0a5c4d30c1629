package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"strings"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/junit"
	"github.com/themisfs/themis/runreport"
	"github.com/themisfs/themis/runreport/runproto"
)

// Exit statuses of themisctl (docs/remote-ci.md).
const (
	// exitFindings: the run went through and found something, with
	// --fail-on-findings.
	exitFindings = 1
	// exitFailed: the command failed (bad input, no daemon, a run that
	// broke).
	exitFailed = 2
)

// exitError is an error with its own exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is err's exit status: its own, or exitError.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailed
}

// exploreOutputs are explore's outputs for CI besides stdout.
type exploreOutputs struct {
	junit          string // --junit FILE
	report         string // --report FILE
	footprints     int    // --report-footprints N
	failOnFindings bool
}

// singleLane reports whether a finding kind is about one lane alone.
func singleLane(kind string) bool { return strings.HasPrefix(kind, "self-reference:") }

// writeJUnit writes the run as a JUnit XML report to path.
func writeJUnit(path string, req *themisv1.ExploreRequest, sum *themisv1.ExploreSummary, found *findingLog) error {
	r := junit.Run{
		Name:    fmt.Sprintf("explore %s depth %d seed %d", strings.Join(req.GetLanes(), ","), req.GetDepth(), req.GetSeed()),
		Lanes:   req.GetLanes(),
		Seconds: sum.GetElapsedS(),
		Properties: map[string]string{"policy": sum.GetPolicy(), "digest": sum.GetDigest(), "backend": sum.GetBackend(),
			"states": fmt.Sprint(sum.GetStates()), "unique_states": fmt.Sprint(sum.GetUniqueStates()), "session": sum.GetSessionId()},
	}
	for _, id := range found.order {
		if jf, ok := junitFinding(found.byID[id], req.GetLanes()); ok {
			r.Findings = append(r.Findings, jf)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	if err := junit.Write(f, r); err != nil {
		f.Close()
		return fmt.Errorf("--junit: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	return nil
}

// junitFinding is f as the JUnit report has it, false for a duplicate
// (its minimal trace is an earlier finding's). A self-reference finding of
// a single-lane run is about its lane.
func junitFinding(f *themisv1.Finding, lanes []string) (junit.Finding, bool) {
	if f.GetDuplicateOf() != "" {
		return junit.Finding{}, false
	}
	jf := junit.Finding{ID: f.GetId(), Kind: f.GetKind(), Detail: f.GetDetail(), Signature: f.GetSignature(), Trace: f.GetTrace()}
	if singleLane(f.GetKind()) && len(lanes) == 1 {
		jf.Lane = lanes[0]
	}
	return jf, true
}

// writeRunReport writes the run as one HTML page to path, with the
// findings' footprints (by id; nil: none measured).
func writeRunReport(path string, req *themisv1.ExploreRequest, run *exploreRun, fps map[string]footprint) error {
	r := runproto.Run(req, run.sum, run.progress, run.found.list())
	for i := range r.Findings {
		fp := fps[r.Findings[i].ID]
		r.Findings[i].Footprint, r.Findings[i].FootprintNote = fp.lanes, cmp.Or(fp.note, "not measured (--report-footprints 0)")
	}
	var b bytes.Buffer
	if err := runreport.Render(&b, r); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if path == "-" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}
