package session

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/vmm"
	"modernc.org/sqlite" // registers the "sqlite" driver (pure Go)
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrations embed.FS

// ledger is the durable record: sessions, checkpoints, events, findings.
// Every method is safe for concurrent use (database/sql pools; SQLite in WAL
// mode with a busy timeout serializes writers).
//
// Durability: the ledger runs with synchronous=NORMAL, under which a commit
// is consistent at once but durable only at the next WAL checkpoint (a
// power cut may lose the last commits, never corrupt the file). Findings
// are written through a second handle with synchronous=FULL, whose commits
// fsync the WAL: a finding once reported survives power loss. Events and
// checkpoints, one per op, stay cheap (BenchmarkLedgerFindingInsert).
type ledger struct {
	file    string // the database file, for errors
	db      *sql.DB
	durable *sql.DB // synchronous=FULL, one connection: finding writes
	// maxEvents is how many events a session keeps (MaxSessionEvents).
	maxEvents int
	// evMu guards evSince: a session's events inserted since its events
	// were last pruned (insertEvent prunes every eventPruneEvery).
	evMu    sync.Mutex
	evSince map[string]int
}

// MaxSessionEvents bounds a session's events in the ledger: insertEvent
// keeps the newest MaxSessionEvents of a session (an explore run records
// one or more per op), deleting older ones every eventPruneEvery inserts,
// so a session holds at most MaxSessionEvents+eventPruneEvery-1 of them
// (twice eventPruneEvery after a daemon restart). Retention (prune) still
// removes events older than its cutoff.
const MaxSessionEvents = 1 << 16

// eventPruneEvery is how many of a session's inserts pass between two
// prunes of its events: the prune walks MaxSessionEvents index entries,
// so amortized it costs MaxSessionEvents/eventPruneEvery per insert.
const eventPruneEvery = 1 << 10

// Ledger file modes: the state dir and the ledger hold every session's
// record and are the daemon user's alone. An existing dir or file with
// wider bits is narrowed to these (not refused: packaging and systemd's
// StateDirectory= create 0755 dirs).
const (
	ledgerDirMode  = 0o700
	ledgerFileMode = 0o600
)

func ledgerDSN(file, sync string) string {
	return "file:" + file + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(" + sync + ")"
}

func openLedger(ctx context.Context, file string) (*ledger, error) {
	if err := secureLedgerFile(file); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	db, err := sql.Open("sqlite", ledgerDSN(file, "NORMAL"))
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", file, err)
	}
	durable, err := sql.Open("sqlite", ledgerDSN(file, "FULL"))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", file, err), db.Close())
	}
	durable.SetMaxOpenConns(1)
	l := &ledger{file: file, db: db, durable: durable, maxEvents: MaxSessionEvents, evSince: map[string]int{}}
	if err := l.migrate(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("ledger %s: %w", file, err), l.close())
	}
	return l, nil
}

// secureLedgerFile makes file's dir ledgerDirMode and the file
// ledgerFileMode, creating them when missing and narrowing wider modes.
// SQLite creates the WAL and its index with the database file's mode.
func secureLedgerFile(file string) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, ledgerDirMode); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, ledgerFileMode)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{dir, ledgerDirMode}, {file, ledgerFileMode}} {
		fi, err := os.Stat(p.path)
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != p.mode {
			if err := os.Chmod(p.path, p.mode); err != nil {
				return fmt.Errorf("narrow mode %v of %s to %v: %w", fi.Mode().Perm(), p.path, p.mode, err)
			}
		}
	}
	return nil
}

// writeErr wraps the error of a write to the ledger (what it was). A
// write its file system had no room for (SQLITE_FULL: ENOSPC on the
// database, its WAL or its index) is errkind.ErrExhausted, naming the file: the
// daemon goes on, and writes work again once there is room.
func (l *ledger) writeErr(what string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return fmt.Errorf("ledger %s: %s: no space left on its file system (ENOSPC; free some in the state dir): %w: %w", l.file, what, err, errkind.ErrExhausted)
	}
	return fmt.Errorf("ledger: %s: %w", what, err)
}

// findingsDB is the handle finding writes go through (synchronous=FULL).
func (l *ledger) findingsDB() *sql.DB { return l.durable }

// syncMode reads db's PRAGMA synchronous (1 NORMAL, 2 FULL).
func syncMode(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&n); err != nil {
		return 0, fmt.Errorf("ledger: synchronous: %w", err)
	}
	return n, nil
}

// migrate applies migrations/NNNN_*.sql above PRAGMA user_version, each in
// one transaction that also bumps the version.
func (l *ledger) migrate(ctx context.Context) error {
	var version int
	if err := l.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read user_version: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		n, err := strconv.Atoi(strings.SplitN(path.Base(name), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: no version number: %w", name, err)
		}
		if n <= version {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := l.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", n)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: set user_version: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %s: commit: %w", name, err)
		}
		version = n
	}
	return nil
}

func (l *ledger) close() error {
	if err := errors.Join(l.durable.Close(), l.db.Close()); err != nil {
		return fmt.Errorf("ledger: close: %w", err)
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("session: marshal %T: %v", v, err)) // only our own plain types
	}
	return string(b)
}

// imageJSON is a session's image as the ledger keeps it ("" for none).
func imageJSON(r *guest.Ref) string {
	if r == nil {
		return ""
	}
	return mustJSON(r)
}

func (l *ledger) insertSession(ctx context.Context, in *Info) error {
	_, err := l.db.ExecContext(ctx, `INSERT INTO sessions
		(id, state, lanes, backend, memory_mib, restore_mode, verify, created, ended, reason, image)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		in.ID, string(in.State), mustJSON(in.Lanes), in.Backend, in.MemoryMiB, string(in.Restore),
		in.Verify, nanos(in.Created), nanos(in.Ended), in.Reason, imageJSON(in.Image))
	if err != nil {
		return l.writeErr("insert session "+in.ID, err)
	}
	return nil
}

// endSession records a session as ended or failed; its checkpoints die with its machine.
func (l *ledger) endSession(ctx context.Context, id string, st State, at time.Time, reason string) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return l.writeErr("end session "+id, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET state = ?, ended = ?, reason = ? WHERE id = ?`,
		string(st), nanos(at), reason, id); err != nil {
		return l.writeErr("end session "+id, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE checkpoints SET live = 0 WHERE session = ?`, id); err != nil {
		return l.writeErr("end session "+id, err)
	}
	if err := tx.Commit(); err != nil {
		return l.writeErr("end session "+id, err)
	}
	l.evMu.Lock()
	delete(l.evSince, id)
	l.evMu.Unlock()
	return nil
}

// runningSessions returns the ids of sessions recorded as running.
func (l *ledger) runningSessions(ctx context.Context) ([]string, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT id FROM sessions WHERE state = ? ORDER BY created`, string(StateRunning))
	if err != nil {
		return nil, fmt.Errorf("ledger: running sessions: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

const sessionCols = `id, state, lanes, backend, memory_mib, restore_mode, verify, created, ended, reason, image,
	(SELECT count(*) FROM checkpoints c WHERE c.session = sessions.id AND c.live = 1)`

func scanSession(sc interface{ Scan(...any) error }) (*Info, error) {
	var in Info
	var state, lanes, restore, image string
	var created, ended int64
	if err := sc.Scan(&in.ID, &state, &lanes, &in.Backend, &in.MemoryMiB, &restore, &in.Verify, &created, &ended, &in.Reason, &image, &in.Depth); err != nil {
		return nil, err
	}
	if image != "" {
		in.Image = new(guest.Ref)
		if err := json.Unmarshal([]byte(image), in.Image); err != nil {
			return nil, fmt.Errorf("ledger: session %s: image: %w", in.ID, err)
		}
	}
	in.State, in.Restore = State(state), vmm.RestoreMode(restore)
	in.Created, in.Ended = fromNanos(created), fromNanos(ended)
	if err := json.Unmarshal([]byte(lanes), &in.Lanes); err != nil {
		return nil, fmt.Errorf("ledger: session %s: lanes: %w", in.ID, err)
	}
	return &in, nil
}

// session returns one session, or an error wrapping errkind.ErrNotFound.
func (l *ledger) session(ctx context.Context, id string) (*Info, error) {
	in, err := scanSession(l.db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session %q: %w", id, errkind.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: session %s: %w", id, err)
	}
	return in, nil
}

// sessionsPage returns up to limit (-1: every) sessions after key in
// (created, id) order, a keyset page on the sessions_by_created index.
func (l *ledger) sessionsPage(ctx context.Context, after PageKey, limit int) ([]*Info, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE (created, id) > (?, ?) ORDER BY created, id LIMIT ?`, nanos(after.Created), after.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: sessions: %w", err)
	}
	defer rows.Close()
	var out []*Info
	for rows.Next() {
		in, err := scanSession(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

func (l *ledger) insertCheckpoint(ctx context.Context, c *Checkpoint, seq int) error {
	_, err := l.db.ExecContext(ctx, `INSERT INTO checkpoints
		(session, id, seq, parent, name, origin, slot, created, roots, overlay_depth, live)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Session, c.ID, seq, c.Parent, c.Name, string(c.Origin), c.Slot, nanos(c.Created), mustJSON(c.Roots), c.OverlayDepth, c.Live)
	if err != nil {
		return l.writeErr("insert checkpoint "+c.Session+"/"+c.ID, err)
	}
	return nil
}

// updateCheckpoint writes the mutable fields: parent, overlay depth, live.
func (l *ledger) updateCheckpoint(ctx context.Context, c *Checkpoint) error {
	_, err := l.db.ExecContext(ctx, `UPDATE checkpoints SET parent = ?, overlay_depth = ?, live = ? WHERE session = ? AND id = ?`,
		c.Parent, c.OverlayDepth, c.Live, c.Session, c.ID)
	if err != nil {
		return l.writeErr("update checkpoint "+c.Session+"/"+c.ID, err)
	}
	return nil
}

func (l *ledger) checkpoints(ctx context.Context, session string, all bool) ([]*Checkpoint, error) {
	q := `SELECT session, id, parent, name, origin, slot, created, roots, overlay_depth, live
		FROM checkpoints WHERE session = ?`
	if !all {
		q += ` AND live = 1`
	}
	rows, err := l.db.QueryContext(ctx, q+` ORDER BY seq`, session)
	if err != nil {
		return nil, fmt.Errorf("ledger: checkpoints of %s: %w", session, err)
	}
	defer rows.Close()
	var out []*Checkpoint
	for rows.Next() {
		var c Checkpoint
		var origin, roots string
		var created int64
		if err := rows.Scan(&c.Session, &c.ID, &c.Parent, &c.Name, &origin, &c.Slot, &created, &roots, &c.OverlayDepth, &c.Live); err != nil {
			return nil, err
		}
		c.Origin, c.Created = Origin(origin), fromNanos(created)
		if err := json.Unmarshal([]byte(roots), &c.Roots); err != nil {
			return nil, fmt.Errorf("ledger: checkpoint %s/%s: roots: %w", c.Session, c.ID, err)
		}
		out = append(out, &c)
	}
	return out, rows.Err()
}

// insertEvent appends an event and returns it with its sequence number.
func (l *ledger) insertEvent(ctx context.Context, e Event) (Event, error) {
	if e.Results == nil {
		e.Results = []LaneResult{}
	}
	res, err := l.db.ExecContext(ctx, `INSERT INTO events (session, time, kind, detail, results, checkpoint)
		VALUES (?, ?, ?, ?, ?, ?)`, e.Session, nanos(e.Time), e.Kind, e.Detail, mustJSON(e.Results), e.Checkpoint)
	if err != nil {
		return e, l.writeErr("insert event "+e.Session+"/"+e.Kind, err)
	}
	if e.Seq, err = res.LastInsertId(); err != nil {
		return e, fmt.Errorf("ledger: insert event: %w", err)
	}
	l.evMu.Lock()
	l.evSince[e.Session]++
	due := l.evSince[e.Session] >= eventPruneEvery
	if due {
		l.evSince[e.Session] = 0
	}
	l.evMu.Unlock()
	if due {
		if err := l.pruneEvents(ctx, e.Session); err != nil {
			return e, err
		}
	}
	return e, nil
}

// pruneEvents deletes session's events but the newest l.maxEvents.
func (l *ledger) pruneEvents(ctx context.Context, session string) error {
	_, err := l.db.ExecContext(ctx, `DELETE FROM events WHERE session = ? AND seq <=
		(SELECT seq FROM events WHERE session = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`, session, session, l.maxEvents)
	if err != nil {
		return l.writeErr("prune events of "+session, err)
	}
	return nil
}

func (l *ledger) events(ctx context.Context, session string, afterSeq int64, limit int) ([]Event, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT seq, session, time, kind, detail, results, checkpoint
		FROM events WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?`, session, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: events of %s: %w", session, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var t int64
		var results string
		if err := rows.Scan(&e.Seq, &e.Session, &t, &e.Kind, &e.Detail, &results, &e.Checkpoint); err != nil {
			return nil, err
		}
		e.Time = fromNanos(t)
		if err := json.Unmarshal([]byte(results), &e.Results); err != nil {
			return nil, fmt.Errorf("ledger: event %d: results: %w", e.Seq, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// findingOps is the JSON of a finding's ops column: the trace and what the
// findings table has no column for.
type findingOps struct {
	Trace       []string        `json:"trace"`
	FoundTrace  []string        `json:"found_trace,omitempty"`
	Signature   string          `json:"signature,omitempty"`
	Lanes       []LaneResult    `json:"lanes,omitempty"`
	Path        string          `json:"path"`
	Field       string          `json:"field,omitempty"`
	Minimized   bool            `json:"minimized,omitempty"`
	OriginalLen int             `json:"original_len,omitempty"`
	DuplicateOf string          `json:"duplicate_of,omitempty"`
	LaneSpecs   []string        `json:"lane_specs"`
	Revert      string          `json:"revert,omitempty"`
	Policy      string          `json:"policy,omitempty"`
	SeenKey     string          `json:"seen_key,omitempty"`
	Crash       *CrashPoint     `json:"crash,omitempty"`
	Kernel      *kreport.Report `json:"kernel,omitempty"`
	Image       *guest.Ref      `json:"image,omitempty"`
}

func opsOf(f *Finding) findingOps {
	ops := findingOps{Trace: f.Trace, FoundTrace: f.FoundTrace, Signature: f.Signature, Lanes: f.Lanes, Path: f.Path, Field: f.Field, Minimized: f.Minimized,
		OriginalLen: f.OriginalLen, DuplicateOf: f.DuplicateOf, LaneSpecs: f.LaneSpecs, Revert: f.Revert, Policy: f.Policy,
		SeenKey: seenKey(f), Crash: f.Crash, Kernel: f.Kernel, Image: f.Image}
	if ops.Trace == nil {
		ops.Trace = []string{}
	}
	return ops
}

// findingInsertFault, when set, is called inside insertFinding's
// transaction between its two inserts: a test-only fault, set only in a
// daemon built with -tags themisfault under FaultEnv (fault_on.go; the
// fault suite's sigkill-finding-insert). Nil in every other build.
var findingInsertFault func(f *Finding)

// insertFinding stores a new finding and counts it in finding_seen, in one
// transaction: a session that finds it again counts once.
func (l *ledger) insertFinding(ctx context.Context, f *Finding) error {
	tx, err := l.findingsDB().BeginTx(ctx, nil)
	if err != nil {
		return l.writeErr("insert finding "+f.ID, err)
	}
	// SQLite integers are signed: the seed is stored as its two's complement.
	_, err = tx.ExecContext(ctx, `INSERT INTO findings (id, session, kind, detail, seed, ops, created)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, f.ID, f.Session, f.Kind, f.Detail, int64(f.Seed), mustJSON(opsOf(f)), nanos(f.Created))
	if err == nil && findingInsertFault != nil {
		findingInsertFault(f)
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, `INSERT INTO finding_seen (key, first_id, first_seen, last_seen, last_session, times)
			VALUES (?, ?, ?, ?, ?, 1)
			ON CONFLICT (key) DO UPDATE SET last_seen = excluded.last_seen,
				times = times + (last_session != excluded.last_session), last_session = excluded.last_session`,
			seenKey(f), f.ID, nanos(f.Created), nanos(f.Created), f.Session)
	}
	if err != nil {
		return errors.Join(l.writeErr("insert finding "+f.ID, err), tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return l.writeErr("insert finding "+f.ID, err)
	}
	return nil
}

// seenKey is what makes two findings the same across runs: the signature,
// the lane specs and the policy (one without a signature is its own).
func seenKey(f *Finding) string {
	sig := f.Signature
	if sig == "" {
		sig = f.Kind + " " + f.ID
	}
	key := sig + "\x00" + strings.Join(f.LaneSpecs, ",") + "\x00" + f.Policy
	if f.Image.Custom() { // a patched module's finding is not the stock kernel's
		key += "\x00" + f.Image.Key
	}
	return key
}

// fillSeen sets each finding's Seen from finding_seen, in one query for
// all of them (the keys passed as one JSON array).
func (l *ledger) fillSeen(ctx context.Context, fs []*Finding, keys []string) error {
	want := make([]string, 0, len(keys))
	for _, k := range keys {
		if k != "" { // "": stored before findings were counted across runs
			want = append(want, k)
		}
	}
	if len(want) == 0 {
		return nil
	}
	rows, err := l.db.QueryContext(ctx, `SELECT key, first_id, first_seen, last_seen, times, status, status_time FROM finding_seen
		WHERE key IN (SELECT value FROM json_each(?))`, mustJSON(want))
	if err != nil {
		return fmt.Errorf("ledger: findings: seen: %w", err)
	}
	seen := make(map[string]Seen, len(want))
	for rows.Next() {
		var key string
		var s Seen
		var first, last, said int64
		if err := rows.Scan(&key, &s.FirstID, &first, &last, &s.Times, &s.Status, &said); err != nil {
			return errors.Join(fmt.Errorf("ledger: findings: seen: %w", err), rows.Close())
		}
		s.First, s.Last = fromNanos(first), fromNanos(last)
		if said != 0 {
			s.StatusTime = fromNanos(said)
		}
		seen[key] = s
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("ledger: findings: seen: %w", err)
	}
	for i, f := range fs {
		if s, ok := seen[keys[i]]; ok {
			f.Seen = s
		}
	}
	return nil
}

// updateFinding replaces a recorded finding's detail and ops (its trace
// once minimized); id, session, kind, seed and created stay.
func (l *ledger) updateFinding(ctx context.Context, f *Finding) error {
	res, err := l.findingsDB().ExecContext(ctx, `UPDATE findings SET detail = ?, ops = ? WHERE id = ?`, f.Detail, mustJSON(opsOf(f)), f.ID)
	if err != nil {
		return l.writeErr("update finding "+f.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return l.writeErr("update finding "+f.ID, err)
	} else if n != 1 {
		return fmt.Errorf("ledger: update finding %s: %d rows: %w", f.ID, n, errkind.ErrNotFound)
	}
	return nil
}

// setFindingStatus sets the status of finding id's row across runs.
func (l *ledger) setFindingStatus(ctx context.Context, id, status string, at time.Time) error {
	f, key, err := scanFinding(l.db.QueryRowContext(ctx, `SELECT `+findingCols+` FROM findings WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("finding %q: %w", id, errkind.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("ledger: finding %s: %w", id, err)
	}
	if key == "" {
		return fmt.Errorf("finding %s was stored before findings were counted across runs: it has no status: %w", f.ID, errkind.ErrState)
	}
	res, err := l.findingsDB().ExecContext(ctx, `UPDATE finding_seen SET status = ?, status_time = ? WHERE key = ?`, status, nanos(at), key)
	if err != nil {
		return l.writeErr("set status of finding "+id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return l.writeErr("set status of finding "+id, err)
	} else if n != 1 {
		return fmt.Errorf("ledger: set status of finding %s: %d rows: %w", id, n, errkind.ErrNotFound)
	}
	return nil
}

const findingCols = `id, session, kind, detail, seed, ops, created`

// scanFinding reads a finding row; key is its finding_seen key ("" for
// findings stored before there was one).
func scanFinding(sc interface{ Scan(...any) error }) (f *Finding, key string, err error) {
	f = &Finding{}
	var seed, created int64
	var ops string
	if err := sc.Scan(&f.ID, &f.Session, &f.Kind, &f.Detail, &seed, &ops, &created); err != nil {
		return nil, "", err
	}
	f.Seed, f.Created = uint64(seed), fromNanos(created)
	var o findingOps
	if err := json.Unmarshal([]byte(ops), &o); err != nil {
		return nil, "", fmt.Errorf("ledger: finding %s: ops: %w", f.ID, err)
	}
	f.Trace, f.FoundTrace, f.Lanes, f.Path, f.Field, f.Minimized, f.OriginalLen, f.DuplicateOf, f.LaneSpecs, f.Revert, f.Policy =
		o.Trace, o.FoundTrace, o.Lanes, o.Path, o.Field, o.Minimized, o.OriginalLen, o.DuplicateOf, o.LaneSpecs, o.Revert, o.Policy
	f.Signature, f.Crash, f.Kernel, f.Image = o.Signature, o.Crash, o.Kernel, o.Image
	return f, o.SeenKey, nil
}

// finding returns one finding, or an error wrapping errkind.ErrNotFound.
func (l *ledger) finding(ctx context.Context, id string) (*Finding, error) {
	f, key, err := scanFinding(l.db.QueryRowContext(ctx, `SELECT `+findingCols+` FROM findings WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("finding %q: %w", id, errkind.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: finding %s: %w", id, err)
	}
	if err := l.fillSeen(ctx, []*Finding{f}, []string{key}); err != nil {
		return nil, err
	}
	return f, nil
}

// findings returns the findings of one session ("": all), oldest first.
func (l *ledger) findings(ctx context.Context, session string) ([]Finding, error) {
	return l.findingsPage(ctx, session, PageKey{}, -1)
}

// findingsPage returns up to limit (-1: every) findings of one session
// ("": all) that come after key in (created, id) order, oldest first.
func (l *ledger) findingsPage(ctx context.Context, session string, after PageKey, limit int) ([]Finding, error) {
	// A keyset page on findings_by_created, or findings_by_session.
	q, args := `SELECT `+findingCols+` FROM findings WHERE (created, id) > (?, ?)`, []any{nanos(after.Created), after.ID}
	if session != "" {
		q, args = q+` AND session = ?`, append(args, session)
	}
	rows, err := l.db.QueryContext(ctx, q+` ORDER BY created, id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("ledger: findings: %w", err)
	}
	var fs []*Finding
	var keys []string
	for rows.Next() {
		f, key, err := scanFinding(rows)
		if err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		fs, keys = append(fs, f), append(keys, key)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("ledger: findings: %w", err)
	}
	if err := l.fillSeen(ctx, fs, keys); err != nil {
		return nil, err
	}
	out := make([]Finding, len(fs))
	for i, f := range fs {
		out[i] = *f
	}
	return out, nil
}

// prune deletes, in one transaction, the sessions that ended or failed
// before cutoff (their checkpoints and events with them) and every event
// older than cutoff. Running sessions and findings stay.
func (l *ledger) prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	var p Pruned
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return p, l.writeErr("prune", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit; Commit's error is returned
	const ended = `SELECT id FROM sessions WHERE state != ? AND ended > 0 AND ended < ?`
	args := []any{string(StateRunning), nanos(cutoff)}
	steps := []struct {
		q    string
		args []any
		n    *int64
	}{
		{`DELETE FROM checkpoints WHERE session IN (` + ended + `)`, args, nil},
		{`DELETE FROM events WHERE time < ? OR session IN (` + ended + `)`, append([]any{nanos(cutoff)}, args...), &p.Events},
		{`DELETE FROM run_records WHERE session IN (` + ended + `)`, args, nil},
		{`DELETE FROM sessions WHERE id IN (` + ended + `)`, args, &p.Sessions},
	}
	for _, st := range steps {
		res, err := tx.ExecContext(ctx, st.q, st.args...)
		if err != nil {
			return Pruned{}, l.writeErr("prune", err)
		}
		if st.n != nil {
			if *st.n, err = res.RowsAffected(); err != nil {
				return Pruned{}, l.writeErr("prune", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return Pruned{}, l.writeErr("prune", err)
	}
	return p, nil
}
