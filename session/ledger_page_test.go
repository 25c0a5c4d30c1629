package session

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// fillLedger inserts sessions and findings in one transaction: three
// sessions share each creation time and two findings each (ties broken by
// id, ids not in insertion order); findings fall in 50 signatures, 40 of
// them counted in finding_seen, and every 17th is stored without a seen
// key (as before findings were counted across runs).
func fillLedger(tb testing.TB, l *ledger, sessions, findings int) {
	tb.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	perm := func(i, n int) int { return (i * 7919) % n } // 7919 is prime: a permutation unless it divides n
	lanes := mustJSON([]Lane{{Name: "ext2", Spec: "ext2", FS: "ext2"}})
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	exec := func(q string, args ...any) {
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			tb.Fatalf("fill ledger: %v", err)
		}
	}
	for i := range sessions {
		exec(`INSERT INTO sessions (id, state, lanes, backend, memory_mib, restore_mode, verify, created, ended, reason)
			VALUES (?, ?, ?, 'qemu', 128, 'devices', 0, ?, 0, '')`,
			fmt.Sprintf("s-%07d", perm(i, sessions)), string(StateEnded), lanes, nanos(t0.Add(time.Duration(i/3)*time.Second)))
	}
	for k := range 50 {
		if k%5 != 0 {
			exec(`INSERT INTO finding_seen (key, first_id, first_seen, last_seen, last_session, times) VALUES (?, ?, ?, ?, 's-0', ?)`,
				sigKey(k), fmt.Sprintf("f-first-%d", k), nanos(t0), nanos(t0.Add(time.Duration(k)*time.Hour)), k+1)
		}
	}
	for i := range findings {
		f := &Finding{ID: fmt.Sprintf("f-%07d", perm(i, findings)), Session: fmt.Sprintf("s-%07d", perm(i%max(sessions, 1), max(sessions, 1))),
			Kind: "state-divergence", Signature: fmt.Sprintf("sig %d", i%50), LaneSpecs: []string{"ext2", "btrfs"}, Policy: "exact",
			Created: t0.Add(time.Duration(i/2) * time.Second), Trace: []string{"mkdir a"}}
		ops := opsOf(f)
		if i%17 == 0 {
			ops.SeenKey = ""
		}
		exec(`INSERT INTO findings (id, session, kind, detail, seed, ops, created) VALUES (?, ?, ?, '', 0, ?, ?)`,
			f.ID, f.Session, f.Kind, mustJSON(ops), nanos(f.Created))
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// sigKey is fillLedger's seen key of signature k.
func sigKey(k int) string {
	return seenKey(&Finding{Signature: fmt.Sprintf("sig %d", k), LaneSpecs: []string{"ext2", "btrfs"}, Policy: "exact"})
}

// naiveSessions is every session, read whole and sorted (the list before
// it paged in SQL).
func naiveSessions(t *testing.T, l *ledger) []*Info {
	t.Helper()
	rows, err := l.db.QueryContext(t.Context(), `SELECT `+sessionCols+` FROM sessions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*Info
	for rows.Next() {
		in, err := scanSession(rows)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		return PageKey{Created: out[j].Created, ID: out[j].ID}.After(PageKey{Created: out[i].Created, ID: out[i].ID})
	})
	return out
}

// naiveFindings is every finding of session ("": all), read whole and
// sorted, each with its Seen read by its own query (fillSeen before it
// took one query per page).
func naiveFindings(t *testing.T, l *ledger, session string) []Finding {
	t.Helper()
	ctx := t.Context()
	rows, err := l.db.QueryContext(ctx, `SELECT `+findingCols+` FROM findings WHERE ? = '' OR session = ?`, session, session)
	if err != nil {
		t.Fatal(err)
	}
	var out []Finding
	var keys []string
	for rows.Next() {
		f, key, err := scanFinding(rows)
		if err != nil {
			t.Fatal(err)
		}
		out, keys = append(out, *f), append(keys, key)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if keys[i] == "" {
			continue
		}
		var first, last, said int64
		err := l.db.QueryRowContext(ctx, `SELECT first_id, first_seen, last_seen, times, status, status_time FROM finding_seen WHERE key = ?`, keys[i]).
			Scan(&out[i].Seen.FirstID, &first, &last, &out[i].Seen.Times, &out[i].Seen.Status, &said)
		if err == nil {
			out[i].Seen.First, out[i].Seen.Last = fromNanos(first), fromNanos(last)
			if said != 0 {
				out[i].Seen.StatusTime = fromNanos(said)
			}
		} else if !strings.Contains(err.Error(), "no rows") {
			t.Fatal(err)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return PageKey{Created: out[j].Created, ID: out[j].ID}.After(PageKey{Created: out[i].Created, ID: out[i].ID})
	})
	return out
}

// walkPages lists every page of size from the start with page, checking
// that each is full but the last, and returns them concatenated.
func walkPages[T any](t *testing.T, size int, page func(after PageKey, limit int) ([]T, error), key func(T) PageKey) []T {
	t.Helper()
	var all []T
	after := PageKey{}
	for {
		p, err := page(after, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) > size {
			t.Fatalf("size %d: a page of %d", size, len(p))
		}
		all = append(all, p...)
		if len(p) < size {
			return all
		}
		after = key(p[len(p)-1])
	}
}

// TestLedgerPagesMatchNaive: sessions and findings listed page by page in
// SQL, at odd page sizes, are the rows (and the findings' seen counts) of
// reading the tables whole and sorting them.
func TestLedgerPagesMatchNaive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	fillLedger(t, l, 301, 457)
	wantSessions := naiveSessions(t, l)
	wantAll := naiveFindings(t, l, "")
	one := wantAll[5].Session
	wantOne := naiveFindings(t, l, one)
	if len(wantSessions) != 301 || len(wantAll) != 457 || len(wantOne) < 2 {
		t.Fatalf("naive lists: %d sessions, %d findings, %d of %s", len(wantSessions), len(wantAll), len(wantOne), one)
	}
	seen := 0
	for _, f := range wantAll {
		if f.Seen.Times > 0 {
			seen++
		}
	}
	if seen == 0 || seen == len(wantAll) {
		t.Fatalf("%d of %d findings seen: the fill should leave some unseen", seen, len(wantAll))
	}
	sessionKey := func(in *Info) PageKey { return PageKey{Created: in.Created, ID: in.ID} }
	findingKey := func(f Finding) PageKey { return PageKey{Created: f.Created, ID: f.ID} }
	for _, size := range []int{1, 2, 7, 13, 100, 300, 301, 1000} {
		got := walkPages(t, size, func(after PageKey, limit int) ([]*Info, error) { return l.sessionsPage(ctx, after, limit) }, sessionKey)
		if !reflect.DeepEqual(got, wantSessions) {
			t.Errorf("sessions in pages of %d: %d rows, not the naive list's %d", size, len(got), len(wantSessions))
		}
		for _, tt := range []struct {
			session string
			want    []Finding
		}{{"", wantAll}, {one, wantOne}} {
			got := walkPages(t, size, func(after PageKey, limit int) ([]Finding, error) {
				return l.findingsPage(ctx, tt.session, after, limit)
			}, findingKey)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("findings of %q in pages of %d: %d rows, not the naive list's %d (or other seen counts)", tt.session, size, len(got), len(tt.want))
			}
		}
	}
	if all, err := l.sessionsPage(ctx, PageKey{}, -1); err != nil || !reflect.DeepEqual(all, wantSessions) {
		t.Errorf("every session (limit -1): %d rows, %v", len(all), err)
	}
}

// TestLedgerListsUseIndexes: the list queries page on an index, without a
// sort of the whole table (migration 0004).
func TestLedgerListsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	tests := []struct {
		name, q string
		args    []any
		index   string
	}{
		{"sessions", `SELECT ` + sessionCols + ` FROM sessions WHERE (created, id) > (?, ?) ORDER BY created, id LIMIT ?`, []any{0, "", 10}, "sessions_by_created"},
		{"findings", `SELECT ` + findingCols + ` FROM findings WHERE (created, id) > (?, ?) ORDER BY created, id LIMIT ?`, []any{0, "", 10}, "findings_by_created"},
		{"a session's findings", `SELECT ` + findingCols + ` FROM findings WHERE (created, id) > (?, ?) AND session = ? ORDER BY created, id LIMIT ?`, []any{0, "", "s-1", 10}, "findings_by_session"},
	}
	for _, tt := range tests {
		rows, err := l.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+tt.q, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		p := strings.Join(plan, "; ")
		if !strings.Contains(p, tt.index) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("%s: plan %q, want %s and no sort", tt.name, p, tt.index)
		}
	}
}

// TestLedgerEventsBounded: a session keeps its newest maxEvents events
// (pruned every eventPruneEvery of its inserts); another session's events
// are not touched, and listing after a seq still pages.
func TestLedgerEventsBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	l.maxEvents = 100
	var seqs []int64
	for i := range 2*eventPruneEvery + 10 {
		e, err := l.insertEvent(ctx, Event{Session: "s-big", Time: time.Now(), Kind: "op", Detail: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, e.Seq)
		if i%200 == 0 {
			if _, err := l.insertEvent(ctx, Event{Session: "s-small", Time: time.Now(), Kind: "op"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	big, err := l.events(ctx, "s-big", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// Pruned at the 2048th insert to 100, then 10 more.
	got := make([]int64, len(big))
	for i, e := range big {
		got[i] = e.Seq
	}
	if want := seqs[len(seqs)-110:]; !slices.Equal(got, want) {
		t.Errorf("s-big kept %d events (seq %v..), want the newest 110", len(got), got[:min(3, len(got))])
	}
	small, err := l.events(ctx, "s-small", 0, 1<<20)
	if err != nil || len(small) != (2*eventPruneEvery+10+199)/200 {
		t.Errorf("s-small: %d events, %v; want every one", len(small), err)
	}
	page, err := l.events(ctx, "s-big", got[50], 10)
	if err != nil || len(page) != 10 || page[0].Seq != got[51] {
		t.Errorf("events after seq %d: %d, %v", got[50], len(page), err)
	}
}
