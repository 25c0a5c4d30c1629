package session

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// benchRows is how many sessions and findings the ledger benchmarks fill.
const benchRows = 100_000

// benchLedger opens a ledger of benchRows sessions and benchRows findings.
func benchLedger(b *testing.B) *ledger {
	b.Helper()
	l, err := openLedger(context.Background(), filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.close(); err != nil {
			b.Error(err)
		}
	})
	fillLedger(b, l, benchRows, benchRows)
	return l
}

// listSessionsPage is one page of ListSessions --all as the daemon reads
// it from the ledger.
func listSessionsPage(ctx context.Context, l *ledger, after PageKey, limit int) ([]*Info, error) {
	return l.sessionsPage(ctx, after, limit)
}

// benchPages walks the list's pages of size from the start (again from the
// start at its end), one page per iteration, and reports the median and
// 99th percentile time of a page.
func benchPages[T any](b *testing.B, size int, page func(after PageKey, limit int) ([]T, error), key func(T) PageKey) {
	var lat []time.Duration
	after := PageKey{}
	for b.Loop() {
		start := time.Now()
		p, err := page(after, size)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if len(p) < size {
			after = PageKey{}
		} else {
			after = key(p[len(p)-1])
		}
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns/page")
	b.ReportMetric(at(0.99), "p99-ns/page")
}

// BenchmarkLedgerListSessions: a page of every session (ListSessions
// --all) from a ledger of 10^5 sessions, at the default and the largest
// page size.
func BenchmarkLedgerListSessions(b *testing.B) {
	l := benchLedger(b)
	ctx := context.Background()
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("page=%d", size), func(b *testing.B) {
			benchPages(b, size, func(after PageKey, limit int) ([]*Info, error) { return listSessionsPage(ctx, l, after, limit) },
				func(in *Info) PageKey { return PageKey{Created: in.Created, ID: in.ID} })
		})
	}
}

// BenchmarkLedgerFindings: a page of every finding (ListFindings, with
// their seen counts) from a ledger of 10^5 findings, at the default and the
// largest page size.
func BenchmarkLedgerFindings(b *testing.B) {
	l := benchLedger(b)
	ctx := context.Background()
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("page=%d", size), func(b *testing.B) {
			benchPages(b, size, func(after PageKey, limit int) ([]Finding, error) { return l.findingsPage(ctx, "", after, limit) },
				func(f Finding) PageKey { return PageKey{Created: f.Created, ID: f.ID} })
		})
	}
}
