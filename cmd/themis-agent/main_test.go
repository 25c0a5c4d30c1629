package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

func TestChannelFromCmdline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cmdline, want string
	}{
		{"", ""},
		{"console=ttyS0 quiet\n", ""},
		{"console=ttyS0 themis.channel=/dev/hvc0 panic=-1\n", "/dev/hvc0"},
		{"themis.channel=/dev/hvc0 themis.channel=/dev/ttyS2", "/dev/ttyS2"},
		{"themis.channel= x", ""},
		{"xthemis.channel=/dev/hvc0", ""},
	}
	for _, tt := range tests {
		if got := channelFromCmdline(tt.cmdline); got != tt.want {
			t.Errorf("channelFromCmdline(%q) = %q, want %q", tt.cmdline, got, tt.want)
		}
	}
}

func TestAgentProcs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env        string
		ncpu, want int
	}{
		{"", 1, minProcs},
		{"", minProcs - 1, minProcs},
		{"", minProcs, 0},
		{"", 16, 0},
		{"1", 1, 0},
	}
	for _, tt := range tests {
		if got := agentProcs(tt.env, tt.ncpu); got != tt.want {
			t.Errorf("agentProcs(%q, %d) = %d, want %d", tt.env, tt.ncpu, got, tt.want)
		}
	}
}

// TestMain runs main instead of the tests when re-executed by TestStdio.
func TestMain(m *testing.M) {
	if os.Getenv("THEMIS_AGENT_TEST_MAIN") == "1" {
		os.Args = append([]string{"themis-agent"}, strings.Fields(os.Getenv("THEMIS_AGENT_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestStdio(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "l0"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "THEMIS_AGENT_TEST_MAIN=1", "THEMIS_AGENT_TEST_ARGS=-stdio -root "+root)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := agent.NewClient(struct {
		io.Reader
		io.Writer
	}{stdout, stdin}, zaptest.NewLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Call(ctx, &agentv1.Request{Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetPing().GetVersion() != version {
		t.Errorf("ping = %v", resp)
	}
	resp, err = c.Call(ctx, &agentv1.Request{Op: &agentv1.Request_Mkdir{Mkdir: &agentv1.Mkdir{Lane: "l0", Path: "d", Mode: 0o755}}})
	if err != nil || resp.GetErrno() != 0 {
		t.Fatalf("mkdir: %v %v", resp, err)
	}
	if _, err := os.Stat(filepath.Join(root, "l0", "d")); err != nil {
		t.Error(err)
	}
	resp, err = c.Call(ctx, &agentv1.Request{Op: &agentv1.Request_SetClock{SetClock: &agentv1.SetClock{}}})
	if err != nil || resp.GetErrno() != int32(syscall.EPERM) {
		t.Errorf("set clock without -machine: %v %v", resp, err)
	}
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
}
