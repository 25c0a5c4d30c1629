package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/embedded"
)

// complete runs the CLI's hidden completion command and returns its
// candidates and its directive line.
func complete(t *testing.T, bin string, env []string, args ...string) ([]string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("themisctl __complete %v: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCompletion: --fs completes the last lane of a list; a FINDING or a
// SESSION completes from a daemon that answers and from none offers
// nothing, at once, without starting one.
func TestCompletion(t *testing.T) {
	bin := themisctl(t)
	noDaemon := []string{"THEMIS_SOCKET=" + filepath.Join(t.TempDir(), "none.sock"), "PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	got, dir := complete(t, bin, noDaemon, "explore", "--fs", "ext2,ex")
	if !slices.Contains(got, "ext2,ext4") || !slices.Contains(got, "ext2,exfat") || slices.Contains(got, "ext2,btrfs") || dir != ":6" {
		t.Errorf("--fs ext2,ex: %q %s; want ext2,ext4 and ext2,exfat, no space after", got, dir)
	}
	if got, _ := complete(t, bin, noDaemon, "check", "--fs", "b"); !slices.Equal(got, []string{"btrfs"}) {
		t.Errorf("check --fs b: %q, want btrfs", got)
	}
	if got, _ := complete(t, bin, noDaemon, "findings", "status", "f-1", "re"); !slices.Equal(got, []string{"reported"}) {
		t.Errorf("findings status f-1 re: %q, want reported", got)
	}
	t0 := time.Now()
	if got, dir := complete(t, bin, noDaemon, "replay", "f-"); len(got) != 0 || dir != ":4" {
		t.Errorf("replay with no daemon: %q %s, want nothing", got, dir)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("a completion with no daemon took %v", d)
	}

	d, err := embedded.Start(context.Background(), t.TempDir(), t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	withDaemon := append(slices.Clone(noDaemon), "THEMIS_ADDR="+d.Addr())
	for _, args := range [][]string{{"replay", ""}, {"fork", ""}, {"session", "rm", "s-1", ""}} {
		if got, dir := complete(t, bin, withDaemon, args...); len(got) != 0 || dir != ":4" {
			t.Errorf("%v against an empty daemon: %q %s, want no candidates", args, got, dir)
		}
	}
}

// TestCompletionsRegistered: every command with --fs completes it; every
// command whose first argument is a FINDING or a SESSION completes it.
func TestCompletionsRegistered(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("fs") != nil {
			n++
			if _, ok := c.GetFlagCompletionFunc("fs"); !ok {
				t.Errorf("%s: --fs has no completion", c.CommandPath())
			}
		}
		if args := strings.Fields(c.Use); len(args) > 1 && (strings.HasPrefix(args[1], "FINDING") || strings.HasPrefix(args[1], "SESSION")) && c.ValidArgsFunction == nil {
			t.Errorf("%s takes %s: no completion", c.CommandPath(), args[1])
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if n < 8 {
		t.Errorf("%d commands with --fs: want the CLI's", n)
	}
}

// TestCompletionDescriptions: what a guest or a client named reaches the
// shell as one line with no control characters, at most 80 bytes of
// valid UTF-8.
func TestCompletionDescriptions(t *testing.T) {
	got := findingCompletions([]*themisv1.Finding{
		{Id: "f-1", Kind: "kernel", Signature: "kernel|\x1b[31mBUG\tat\nx"},
		{Id: "f-2", Kind: "crash", Signature: "crash lost ext2 after fsync " + strings.Repeat("é", 60)},
	})
	want0 := "f-1\tkernel| [31mBUG at x"
	if got[0] != want0 {
		t.Errorf("hostile signature: %q, want %q", got[0], want0)
	}
	id, desc, _ := strings.Cut(got[1], "\t")
	if id != "f-2" || !strings.HasPrefix(desc, "crash lost") || len(desc) > 80 || !strings.Contains(desc, "é") || strings.ContainsRune(desc, '\uFFFD') {
		t.Errorf("long signature: %q", got[1])
	}
}

// TestWithStatus: --status keeps the findings of the statuses asked; one
// with no status (stored before the count) is new.
func TestWithStatus(t *testing.T) {
	fs := []*themisv1.Finding{{Id: "f-1", Status: "new"}, {Id: "f-2", Status: "reported"}, {Id: "f-3"}, {Id: "f-4", Status: "expected"}}
	ids := func(fs []*themisv1.Finding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.GetId())
		}
		return out
	}
	for _, tt := range []struct {
		statuses []string
		want     []string
	}{
		{nil, []string{"f-1", "f-2", "f-3", "f-4"}},
		{[]string{"new"}, []string{"f-1", "f-3"}},
		{[]string{"reported", "expected"}, []string{"f-2", "f-4"}},
		{[]string{"fixed-upstream"}, nil},
	} {
		if got := ids(withStatus(fs, tt.statuses)); !slices.Equal(got, tt.want) {
			t.Errorf("withStatus(%v) = %v, want %v", tt.statuses, got, tt.want)
		}
	}
}
