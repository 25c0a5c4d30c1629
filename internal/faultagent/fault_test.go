package faultagent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/agent"
	"github.com/themisfs/themis/agent/inguest"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// lane is the one lane of the test servers.
const lane = "l"

// serve runs an inguest.Server over a Channel on one end of a pipe, with a
// lane holding one regular file, and returns a client on the other end
// and the Channel. Cleanup closes the pipe and waits for Serve.
func serve(t *testing.T, o Options) (*agent.Client, *Channel) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, lane), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, lane, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	host, guest := net.Pipe()
	o.Log = zaptest.NewLogger(t)
	ch := Wrap(guest, o)
	srv := &inguest.Server{Root: root, Log: zaptest.NewLogger(t)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ch) }()
	t.Cleanup(func() {
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
		host.Close()
		guest.Close()
		<-done // an error is expected: the pipe closed under a faulted stream
	})
	return agent.NewClient(host, zaptest.NewLogger(t)), ch
}

func stat(p string) *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: lane, Path: p}}}
}

func fingerprint() *agentv1.Request {
	return &agentv1.Request{Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: lane, Leaves: true}}}
}

// call runs req with a deadline.
func call(t *testing.T, c *agent.Client, req *agentv1.Request) (*agentv1.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Call(ctx, req)
}

// sizes returns the sizes of the regular files in a fingerprint.
func sizes(t *testing.T, c *agent.Client) []int64 {
	t.Helper()
	resp, err := call(t, c, fingerprint())
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	var out []int64
	for _, e := range resp.GetFingerprint().GetLeaves() {
		if e.GetKind() == agentv1.Kind_KIND_REGULAR {
			out = append(out, e.GetSize())
		}
	}
	return out
}

// TestArmedFaults arms each mode and checks what the host's client sees
// of the arming Stat, and that a channel not armed passes everything.
func TestArmedFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		path    string
		wantErr error // the arming call's error; nil: answered
	}{
		{"not armed", "d/.themis-fault-bogus", nil},
		{"plain", "f", nil},
		{"garbage", "d/" + ArmPath(Garbage), agent.ErrDecode},
		{"oversized", ArmPath(Oversized), agent.ErrFrameTooLarge},
		{"stale", ArmPath(Stale), agent.ErrBadResponse},
		{"stale-few", ArmPath(StaleFew), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := serve(t, Options{})
			if _, err := call(t, c, stat("f")); err != nil { // an id to go stale
				t.Fatal(err)
			}
			resp, err := call(t, c, stat(tt.path))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("arming Stat: %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("arming Stat: %v", err)
			}
			if tt.path != "f" && resp.GetErrno() != int32(syscall.ENOENT) {
				t.Errorf("Stat %s: errno %d, want ENOENT", tt.path, resp.GetErrno())
			}
			if got := sizes(t, c); len(got) != 1 || got[0] != int64(len("content")) {
				t.Errorf("sizes after: %v, want [7]", got)
			}
		})
	}
}

// TestNegSize checks that NegSize turns every later fingerprint's regular
// file sizes to -1, and only later ones.
func TestNegSize(t *testing.T) {
	t.Parallel()
	c, _ := serve(t, Options{})
	if got := sizes(t, c); len(got) != 1 || got[0] != 7 {
		t.Fatalf("sizes before arming: %v, want [7]", got)
	}
	if _, err := call(t, c, stat(ArmPath(NegSize))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := sizes(t, c); len(got) != 1 || got[0] != -1 {
			t.Errorf("sizes after arming: %v, want [-1]", got)
		}
	}
}

// TestDelay checks that Delay holds the arming Stat's answer.
func TestDelay(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	c, _ := serve(t, Options{Delay: d})
	t0 := time.Now()
	if _, err := call(t, c, stat(ArmPath(Delay))); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < d {
		t.Errorf("delayed Stat answered after %v, want at least %v", took, d)
	}
	t0 = time.Now()
	if _, err := call(t, c, stat("f")); err != nil || time.Since(t0) >= d {
		t.Errorf("next Stat: %v after %v, want an answer at once", err, time.Since(t0))
	}
}

// lineCounter counts the console lines written to it and the longest.
type lineCounter struct {
	mu      sync.Mutex
	lines   int
	longest int
	cur     int
}

func (w *lineCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			w.lines++
			w.longest = max(w.longest, w.cur)
			w.cur = 0
			continue
		}
		w.cur++
	}
	return len(p), nil
}

func (w *lineCounter) counts() (lines, longest int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines, w.longest
}

// TestLog checks that Log floods the console (lines past 1 MiB among
// them) and the kernel log while the server goes on answering, until Close.
func TestLog(t *testing.T) {
	t.Parallel()
	console := &lineCounter{}
	kmsg := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(kmsg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, ch := serve(t, Options{Console: console, Kmsg: kmsg, LongLine: 1<<20 + 1})
	if _, err := call(t, c, stat(ArmPath(Log))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines, longest := console.counts()
		if lines >= 64 && longest > 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console after 10s: %d lines, the longest %d bytes; want 64, one past 1 MiB", lines, longest)
		}
		if _, err := call(t, c, stat("f")); err != nil {
			t.Fatalf("Stat during the log: %v", err)
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(kmsg)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("themis-fault: kmsg line")); n < 64 {
		t.Errorf("kernel log: %d lines, want at least 64", n)
	}
	lines, _ := console.counts()
	time.Sleep(50 * time.Millisecond)
	if after, _ := console.counts(); after != lines {
		t.Errorf("console went on after Close: %d lines, then %d", lines, after)
	}
}

// TestProductionAgentHasNoFaults checks that only the themisfault build
// of the agent imports this package.
func TestProductionAgentHasNoFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("go list: skipped in -short mode")
	}
	const pkg = "github.com/themisfs/themis/internal/faultagent"
	for _, tt := range []struct {
		tags string
		want bool
	}{{"", false}, {"themisfault", true}} {
		cmd := exec.Command("go", "list", "-deps", "-tags", tt.tags, "./cmd/themis-agent")
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tt.tags, err)
		}
		got := false
		for _, dep := range strings.Fields(string(out)) {
			got = got || dep == pkg
		}
		if got != tt.want {
			t.Errorf("agent built with tags %q imports %s: %v, want %v", tt.tags, pkg, got, tt.want)
		}
	}
}
