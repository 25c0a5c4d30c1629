package session

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
)

// Finding is a property violation found by an explore run, as the ledger
// keeps it.
type Finding struct {
	// ID is "f-<12 hex>".
	ID string
	// Session is the explore run's session.
	Session string
	// Kind is explore's kind ("errno-divergence", "state-divergence",
	// "guest-died", "self-reference:replay") or the run's own
	// (runs/exploration: "self-reference:remount", ...).
	Kind string
	// Detail says what differs, in words.
	Detail string
	// Trace is the ops from the root state, in opspec short form
	// (opspec.Parse reads them back); its last op exposed the finding. It
	// is the trace as found until minimization replaces it with the
	// minimized one (Minimized).
	Trace []string
	// FoundTrace is the trace as the search found it: first as first
	// seen, then, with the minimized one, the search's canonical trace
	// (the least reaching the finding's state; explore.Finding.Found).
	FoundTrace []string
	// Signature groups findings of one bug (explore.Finding.Signature):
	// what a merge of shards keeps one finding of.
	Signature string
	// Lanes holds every lane's errno for the last op of Trace.
	Lanes []LaneResult
	// Path is the first differing path of a state divergence ("" is the lane
	// root) and Field what differs there ("mode", "nlink", "missing", ...).
	Path, Field string
	// Seed is the run's seed.
	Seed uint64
	// Minimized is true once Trace is the result of delta debugging, which
	// runs after the search (a run cancelled or whose guest died keeps its
	// findings as found); OriginalLen is the length of the trace as found.
	Minimized   bool
	OriginalLen int
	// DuplicateOf is the id of an earlier finding of the run whose
	// minimized trace this one's repeats ("" when none); the summary does
	// not count duplicates.
	DuplicateOf string
	// Created is when the finding was recorded.
	Created time.Time
	// LaneSpecs are the run's lane specs, to replay the trace in a new session.
	LaneSpecs []string
	// Revert is the run's revert strategy ("machine", "remount"; "" for
	// findings recorded before there was a choice: machine). Under
	// "remount" every op of the trace ran on freshly mounted lanes, and a
	// replay does the same.
	Revert string
	// Policy is the canonicalization policy the run judged it under
	// (family.AutoPolicy, "exact", a named policy; "" for findings
	// recorded before it was kept).
	Policy string
	// Seen is how often runs found it (the same signature, lanes and
	// policy), over every session the ledger has held.
	Seen Seen
	// Crash is, for a finding of kind KindCrash, the crash state it is
	// about (nil for every other kind).
	Crash *CrashPoint
	// Kernel is, for a finding of kind KindKernel, the report the
	// guest's kernel left on its console when it crashed (nil for every
	// other kind).
	Kernel *kreport.Report
	// Image is the guest image the run booted: kernel, flavour, patches
	// (nil for findings recorded before it was kept).
	Image *guest.Ref
}

// KindKernel is the kind of a finding whose guest kernel crashed (an
// Oops, a BUG, a WARN, a panic: explore.KindKernel): Trace's last op ran
// when it did; Kernel holds the report.
const KindKernel = "kernel"

// KindCrash is the kind of a finding about a crash state (runs/crashcheck,
// explore --crash): Trace is the ops that ran under the write log, the
// last one the persistence point; LaneSpecs holds the one lane's spec.
const KindCrash = "crash"

// CrashPoint is a crash finding's disk: one crash state of a lane's write
// log, and how it was checked.
type CrashPoint struct {
	// Lane is the lane's name in the run that found it.
	Lane string `json:"lane"`
	// Setup ran before the log's checkpoint, followed by a sync when
	// SetupSync (crashcheck's setup) and not otherwise (explore's path).
	Setup     []string `json:"setup,omitempty"`
	SetupSync bool     `json:"setup_sync,omitempty"`
	// Keep is the log entries the state keeps (crash.State), Flushes how
	// many flushes had completed, Kind "prefix" or "subset", Epoch the
	// crash's epoch's writes.
	Keep    []int  `json:"keep"`
	Flushes int    `json:"flushes"`
	Kind    string `json:"kind"`
	Epoch   []int  `json:"epoch,omitempty"`
	// Writes and LogFlushes are the log's counts when the trace's last op
	// returned: the persistence point.
	Writes     int `json:"writes"`
	LogFlushes int `json:"log_flushes"`
	// Verdict is the checker's ("dirty", "broken"; "clean" when only
	// Durability failed), Durability "LOST ..." or "kept" or "", Output the
	// checker's output, cut.
	Verdict    string `json:"verdict"`
	Durability string `json:"durability,omitempty"`
	Output     string `json:"output,omitempty"`
	// States and NotClean count the lane's crash states of this trace.
	States   int `json:"states"`
	NotClean int `json:"not_clean"`
}

// Seen counts a finding across runs.
type Seen struct {
	FirstID     string    // the first finding of it
	First, Last time.Time // when it was first and last found
	Times       int       // in how many sessions (zero: not counted, a finding stored before)
	// Status is a user's word on it (FindingStatuses; StatusNew until one
	// is said), StatusTime when it was said (zero: never).
	Status     string
	StatusTime time.Time
}

// What a user can say of a finding across runs (SetFindingStatus): api's.
const (
	StatusNew           = api.StatusNew
	StatusReported      = api.StatusReported
	StatusFixedUpstream = api.StatusFixedUpstream
	StatusExpected      = api.StatusExpected
)

// FindingStatuses are the statuses SetFindingStatus takes.
var FindingStatuses = api.FindingStatuses

// ValidateFindingStatus checks a SetFindingStatus request: an id, and a
// status of FindingStatuses (errkind.Invalid naming the field).
func ValidateFindingStatus(id, status string) error {
	if id == "" {
		return errkind.Invalid("finding_id", "required")
	}
	if !slices.Contains(FindingStatuses, status) {
		return errkind.Invalid("status", "%q: want one of %s", status, strings.Join(FindingStatuses, ", "))
	}
	return nil
}

// SetFindingStatus records a user's word on finding id and every finding
// of it across runs (the same signature, lane specs and policy: Seen),
// and returns the finding as it now reads. An unknown status is
// errkind.Invalid on "status", an unknown id errkind.ErrNotFound; a
// finding stored before findings were counted across runs has no status
// to set (errkind.ErrState).
func (m *Manager) SetFindingStatus(ctx context.Context, id, status string) (*Finding, error) {
	if err := ValidateFindingStatus(id, status); err != nil {
		return nil, err
	}
	if err := m.ledger.setFindingStatus(ctx, id, status, time.Now()); err != nil {
		return nil, err
	}
	return m.ledger.finding(ctx, id)
}

// Findings lists the findings of one session ("" = every session), oldest
// first. An unknown session is errkind.ErrNotFound.
func (m *Manager) Findings(ctx context.Context, sessionID string) ([]Finding, error) {
	return m.FindingsPage(ctx, sessionID, PageKey{}, -1)
}

// PageKey is where a page of a list ordered by (creation time, id) ends:
// the next page holds what comes after it. The zero key is before all.
type PageKey struct {
	Created time.Time
	ID      string
}

// After reports whether k comes after o in (created, id) order.
func (k PageKey) After(o PageKey) bool {
	return k.Created.After(o.Created) || k.Created.Equal(o.Created) && k.ID > o.ID
}

// FindingsPage lists up to limit (-1: every) findings of one session (""
// = every session) after key, oldest first. A session with no findings and
// no record is errkind.ErrNotFound; the findings of a session whose record was
// pruned (Prune) are still listed.
func (m *Manager) FindingsPage(ctx context.Context, sessionID string, after PageKey, limit int) ([]Finding, error) {
	fs, err := m.ledger.findingsPage(ctx, sessionID, after, limit)
	if err != nil || len(fs) > 0 || sessionID == "" {
		return fs, err
	}
	if _, err := m.ledger.session(ctx, sessionID); err != nil {
		return nil, err
	}
	return fs, nil
}

// Finding returns one finding by id; an unknown id is errkind.ErrNotFound.
func (m *Manager) Finding(ctx context.Context, id string) (*Finding, error) {
	if id == "" {
		return nil, errkind.Invalid("finding_id", "required")
	}
	return m.ledger.finding(ctx, id)
}
