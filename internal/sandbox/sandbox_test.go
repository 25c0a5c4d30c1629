package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCapped(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		half   int
		writes []string
		want   string
		cut    int64
	}{
		{"short", 4, []string{"abc"}, "abc", 0},
		{"exact", 2, []string{"ab", "cd"}, "abcd", 0},
		{"cut", 2, []string{"ab", "cdefgh"}, "ab\n[... 4 bytes of output cut ...]\ngh", 4},
		{"many writes", 3, []string{"abcd", "efgh", "ijkl", "mnop"}, "abc\n[... 10 bytes of output cut ...]\nnop", 10},
	} {
		c := &capped{half: tt.half}
		for _, w := range tt.writes {
			if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: Write = %d, %v", tt.name, n, err)
			}
		}
		if got := string(c.bytes()); got != tt.want || c.cut != tt.cut {
			t.Errorf("%s: %q (cut %d), want %q (cut %d)", tt.name, got, c.cut, tt.want, tt.cut)
		}
	}
}

// TestRunModes runs the same scripts isolated (where the host allows) and
// with the namespaces off (as where not root): exit status, timeout,
// signal, and the caller's cancel all end the run the same way.
func TestRunModes(t *testing.T) {
	real := probe
	t.Cleanup(func() { probe = real })
	modes := []struct {
		name  string
		probe func() isolation
	}{{"degraded", func() isolation { return isolation{why: "test: off"} }}}
	if real().ok {
		modes = append(modes, struct {
			name  string
			probe func() isolation
		}{"isolated", real})
	}
	lim := Limits{Timeout: 2 * time.Second, CPU: 10 * time.Second, Output: 4096}
	for _, m := range modes {
		probe = m.probe
		for _, tt := range []struct {
			name, script string
			code         int
			err          error
			out          string
		}{
			{"exit 4", "echo hello; exit 4", 4, nil, "hello"},
			{"sees its image", `cat "$1"`, 0, nil, "image bytes"},
			{"hangs", "exec sleep 100", -1, ErrTimeout, ""},
			{"hangs in a child", "sleep 100; exit 0", -1, ErrTimeout, ""},
			{"crashes", `exec perl -e 'unpack("p", pack("L!", 1))'`, -1, ErrSignal, ""},
		} {
			dir := t.TempDir()
			bin, image := filepath.Join(dir, "tool"), filepath.Join(dir, "img")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+tt.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(image, []byte("image bytes"), 0o600); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := Run(context.Background(), lim, bin, nil, image)
			if time.Since(start) > 10*time.Second {
				t.Errorf("%s/%s: took %v", m.name, tt.name, time.Since(start))
			}
			if !errors.Is(err, tt.err) || res.ExitCode != tt.code || !bytes.Contains(res.Output, []byte(tt.out)) {
				t.Errorf("%s/%s: code %d, %v, output %q; want %d, %v, %q", m.name, tt.name, res.ExitCode, err, res.Output, tt.code, tt.err, tt.out)
			}
			if m.name == "degraded" && !strings.HasPrefix(res.Isolation, "none: test: off") {
				t.Errorf("%s/%s: isolation %q, want it to say none and why", m.name, tt.name, res.Isolation)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		if _, err := Run(ctx, lim, "/bin/sh", []string{"-c", "sleep 100"}, "/dev/null"); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: cancelled: %v, want context.Canceled", m.name, err)
		}
	}
}

// TestRunSetupFails: an image that is not there fails the setup (isolated)
// or the tool (degraded), never passes as a check.
func TestRunSetupFails(t *testing.T) {
	if !Isolated() {
		t.Skip("no namespaces here: " + Why())
	}
	missing := filepath.Join(t.TempDir(), "none")
	if _, err := Run(context.Background(), Limits{Timeout: 5 * time.Second}, "/bin/true", nil, missing); !errors.Is(err, ErrSetup) {
		t.Errorf("missing image: %v, want ErrSetup", err)
	}
}

// TestRunWithoutPrlimit: on a host without util-linux (the emulated AMD-V
// host's minimal root) the tool still runs, degraded, with its limits set
// right after its exec: a writer without bound is stopped at the file size
// limit, and the result says how the limits were set.
func TestRunWithoutPrlimit(t *testing.T) {
	realProbe, realHas := probe, hasPrlimit
	t.Cleanup(func() { probe, hasPrlimit = realProbe, realHas })
	probe = func() isolation { return isolation{why: "test: off"} }
	hasPrlimit = func() bool { return false }
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	lim := Limits{Timeout: 5 * time.Second, FileSize: 1 << 20, Output: 4096}
	res, err := Run(context.Background(), lim, "/bin/sh", []string{"-c", `sleep 0.2; head -c 8388608 /dev/zero > "$0"; echo wrote`, out}, "/dev/null")
	if err != nil && !errors.Is(err, ErrSignal) {
		t.Fatalf("run: %v", err)
	}
	if fi, serr := os.Stat(out); serr != nil || fi.Size() > 1<<20 {
		t.Errorf("writer: %v, %v; want it stopped at 1 MiB", fi, serr)
	}
	if !strings.Contains(res.Isolation, "rlimits set just after exec") {
		t.Errorf("isolation %q: want it to say how the limits were set", res.Isolation)
	}
	if ok, _ := Run(context.Background(), lim, "/bin/sh", []string{"-c", "exit 3"}, "/dev/null"); ok.ExitCode != 3 {
		t.Errorf("a plain tool: exit %d, want 3", ok.ExitCode)
	}
}

// TestWritableImage: isolated, the tool cannot write its image unless
// Limits.WritableImage says so, and then its writes reach the caller's
// file.
func TestWritableImage(t *testing.T) {
	if !probe().ok {
		t.Skip("skipped: this host cannot isolate (not root, or no namespaces): the image is then only as protected as its file")
	}
	for _, writable := range []bool{false, true} {
		dir := t.TempDir()
		bin, image := filepath.Join(dir, "tool"), filepath.Join(dir, "img")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\nprintf replayed > \"$1\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(image, []byte("journal"), 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), Limits{Timeout: 10 * time.Second, WritableImage: writable}, bin, nil, image)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(image)
		if err != nil {
			t.Fatal(err)
		}
		want, code := "journal", res.ExitCode != 0
		if writable {
			want, code = "replayed", res.ExitCode == 0
		}
		if string(got) != want || !code {
			t.Errorf("writable %v: image %q, exit %d (%s); want %q", writable, got, res.ExitCode, res.Output, want)
		}
	}
}
