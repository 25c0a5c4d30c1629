package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/themisfs/themis/errkind"
)

// MaxRunRecord bounds the bytes of one run record (SaveRecord).
const MaxRunRecord = 8 << 20

// SaveRecord stores the run's record: what a runner keeps of a finished
// run for drawing it afterwards (runs/exploration.Record), kind naming its
// format. A second call replaces the first.
func (r *Run) SaveRecord(ctx context.Context, kind string, record []byte) error {
	if len(record) > MaxRunRecord {
		return fmt.Errorf("run record of %s: %d bytes, at most %d", r.info.ID, len(record), MaxRunRecord)
	}
	return r.m.ledger.saveRecord(context.WithoutCancel(ctx), r.info.ID, kind, record, time.Now().UTC())
}

// RunRecord returns the record a run of session id saved and its kind; a
// session whose run saved none (or an unknown one) is errkind.ErrNotFound.
func (m *Manager) RunRecord(ctx context.Context, id string) (kind string, record []byte, err error) {
	if id == "" {
		return "", nil, errkind.Invalid("session_id", "required")
	}
	return m.ledger.record(ctx, id)
}

func (l *ledger) saveRecord(ctx context.Context, session, kind string, record []byte, at time.Time) error {
	_, err := l.db.ExecContext(ctx, `INSERT INTO run_records (session, kind, record, created) VALUES (?, ?, ?, ?)
		ON CONFLICT(session) DO UPDATE SET kind = excluded.kind, record = excluded.record, created = excluded.created`,
		session, kind, record, nanos(at))
	if err != nil {
		return l.writeErr("save run record of "+session, err)
	}
	return nil
}

func (l *ledger) record(ctx context.Context, session string) (kind string, record []byte, err error) {
	err = l.db.QueryRowContext(ctx, `SELECT kind, record FROM run_records WHERE session = ?`, session).Scan(&kind, &record)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, fmt.Errorf("run record of session %q: %w (no run of it kept one: an explore run keeps one when it ends)", session, errkind.ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("ledger: run record of %s: %w", session, err)
	}
	return kind, record, nil
}
