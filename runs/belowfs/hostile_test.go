package belowfs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
	"github.com/themisfs/themis/vmm"
)

// loud is a fake machine whose kernel log and file reads are what its
// functions make of the call count; everything else is the double's.
type loud struct {
	sessiontest.Machine
	calls atomic.Int64
	kmsg  func(call int64, after uint64) []*agentv1.KmsgLine  // nil: an empty log
	read  func(req *agentv1.ReadFile) *agentv1.ReadFileResult // nil: eof at once
}

// Call implements vmm.Machine.
func (l *loud) Call(ctx context.Context, req *agentv1.Request) (*agentv1.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch op := req.Op.(type) {
	case *agentv1.Request_Kmsg:
		n := l.calls.Add(1)
		var lines []*agentv1.KmsgLine
		if l.kmsg != nil {
			lines = l.kmsg(n, op.Kmsg.GetAfterSeq())
		}
		return &agentv1.Response{Result: &agentv1.Response_Kmsg{Kmsg: &agentv1.KmsgResult{Lines: lines}}}, nil
	case *agentv1.Request_ReadFile:
		l.calls.Add(1)
		res := &agentv1.ReadFileResult{Eof: true}
		if l.read != nil {
			res = l.read(op.ReadFile)
		}
		return &agentv1.Response{Result: &agentv1.Response_ReadFile{ReadFile: res}}, nil
	}
	return l.Machine.Call(ctx, req)
}

// lines returns n kernel log lines numbered from first, each text long.
func lines(first uint64, n int, text string) []*agentv1.KmsgLine {
	out := make([]*agentv1.KmsgLine, n)
	for i := range out {
		out[i] = &agentv1.KmsgLine{Seq: first + uint64(i), Text: text}
	}
	return out
}

// newLoud acquires a run on a loud machine and returns its corrupter.
func newLoud(t *testing.T, l *loud) *corrupter {
	t.Helper()
	m, _ := sessiontest.NewManager(t, t.TempDir(), session.Config{}, func(vmm.Config) vmm.Machine { return l })
	run, err := m.Acquire(context.Background(), session.CreateOptions{Lanes: []string{"ext2"}}, "corrupt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Close)
	return &corrupter{below: newBelow(run)}
}

// TestKmsgBounded: draining the kernel log takes a bounded number of
// calls and keeps a bounded number of bounded lines (the first and the
// last, with a line saying how many were dropped), whatever the guest
// answers: a log that never ends, one that repeats itself, huge lines.
func TestKmsgBounded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		kmsg      func(call int64, after uint64) []*agentv1.KmsgLine
		wantLines int   // lines returned (a dropped-lines note included)
		wantCalls int64 // at most this many Kmsg calls
		wantText  string
	}{
		{"honest", func(call int64, after uint64) []*agentv1.KmsgLine {
			if call > 1 {
				return nil
			}
			return lines(1, 3, "EXT2-fs error")
		}, 3, 2, "EXT2-fs error"},
		{"never ends", func(call int64, after uint64) []*agentv1.KmsgLine {
			return lines(after+1, 1000, "spam")
		}, maxKmsgKeep + 1, maxKmsgCalls, "dropped"},
		{"repeats itself", func(call int64, after uint64) []*agentv1.KmsgLine {
			return lines(1, 10, "same")
		}, 10, 2, "same"},
		{"huge lines", func(call int64, after uint64) []*agentv1.KmsgLine {
			if call > 3 {
				return nil
			}
			return lines(after+1, 4, strings.Repeat("x", 1<<20))
		}, 12, 4, "bytes skipped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := &loud{kmsg: tc.kmsg}
			c := newLoud(t, l)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			got, err := c.kmsg(ctx)
			if err != nil {
				t.Fatalf("kmsg: %v (after %d calls)", err, l.calls.Load())
			}
			if len(got) != tc.wantLines {
				t.Errorf("%d lines, want %d", len(got), tc.wantLines)
			}
			if n := l.calls.Load(); n > tc.wantCalls {
				t.Errorf("%d calls, want at most %d", n, tc.wantCalls)
			}
			size := 0
			for _, s := range got {
				size += len(s)
				if len(s) > maxKmsgLine+64 {
					t.Errorf("a line of %d bytes kept", len(s))
				}
			}
			if !strings.Contains(strings.Join(got, "\n"), tc.wantText) {
				t.Errorf("lines lack %q", tc.wantText)
			}
		})
	}
}

// TestReadAllBounded: reading a file to its end takes at most
// maxReadAll/profileReadChunk+1 calls whatever the guest answers (a guest
// that never says where the end is, or a huge sparse file, is read to
// maxReadAll), and a read that returns more than was asked is an error.
func TestReadAllBounded(t *testing.T) {
	t.Parallel()
	zeros := make([]byte, profileReadChunk+1)
	cases := []struct {
		name    string
		read    func(req *agentv1.ReadFile) *agentv1.ReadFileResult
		wantErr bool
	}{
		{"more than asked", func(req *agentv1.ReadFile) *agentv1.ReadFileResult {
			return &agentv1.ReadFileResult{Data: zeros[:req.GetLength()+1]}
		}, true},
		{"honest", func(req *agentv1.ReadFile) *agentv1.ReadFileResult {
			return &agentv1.ReadFileResult{Data: make([]byte, min(req.GetLength(), max(0, 3<<20-req.GetOffset()))), Eof: req.GetOffset()+req.GetLength() >= 3<<20}
		}, false},
		{"never ends", func(req *agentv1.ReadFile) *agentv1.ReadFileResult {
			return &agentv1.ReadFileResult{Data: zeros[:req.GetLength()]}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := &loud{read: tc.read}
			c := newLoud(t, l)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.readAll(ctx, "ext2", "f")
			if (err != nil) != tc.wantErr {
				t.Fatalf("readAll: %v (after %d calls), want error %v", err, l.calls.Load(), tc.wantErr)
			}
			if n := l.calls.Load(); n > maxReadAll/profileReadChunk+1 {
				t.Fatalf("%d reads, want at most %d", n, maxReadAll/profileReadChunk+1)
			}
		})
	}
}

// TestKmsgKeep: the kept lines are those of a naive model: all of them up
// to maxKmsgKeep, else the first and last halves around one note.
func TestKmsgKeep(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 99, 100, 101, 199, 200, 201, 1000, 1234} {
		var k kmsgKeep
		var all []string
		for i := range n {
			s := fmt.Sprint(i)
			all = append(all, s)
			k.add(s)
		}
		want := all
		if n > maxKmsgKeep {
			want = append(append(slices.Clone(all[:maxKmsgKeep/2]), fmt.Sprintf("themis: %d kernel log lines dropped here", n-maxKmsgKeep)), all[n-maxKmsgKeep/2:]...)
		}
		if got := k.lines(); !slices.Equal(got, want) {
			t.Errorf("%d lines: kept %d, want %d (%v...)", n, len(got), len(want), got[:min(3, len(got))])
		}
	}
}
