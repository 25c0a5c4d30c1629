package hostfsck

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/sandbox"
)

// fakeTool is a checker standing in for e2fsck: a shell script in a temp
// dir, run as the real one is (the image path last).
func fakeTool(t *testing.T, script string) Tool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "e2fsck")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tool := Tool{Name: "fake e2fsck", bin: bin, pkg: "e2fsprogs"}
	tool.Limits = sandbox.Limits{Timeout: 3 * time.Second, CPU: 2 * time.Second,
		Memory: 512 << 20, FileSize: 1 << 20, Files: 64, Output: 64 << 10}
	return tool
}

// TestHostileChecker runs checkers that hang, write without bound, crash,
// flood their output, or reach for the host's files: each check returns
// (within its timeout) with an error or a verdict, never hangs, and
// nothing of the host is read or written.
func TestHostileChecker(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "outside")
	for _, tt := range []struct {
		name, script string
		err          string // the error contains this; "" none
		isolated     bool   // only meaningful inside the namespaces
		timeout      time.Duration
		check        func(t *testing.T, out string)
	}{
		{name: "sleeps forever", script: "sleep 1000000", err: "timed out after 3s"},
		{name: "ignores SIGTERM", script: "trap '' TERM; while :; do :; done", err: "CPU limit", timeout: 15 * time.Second},
		{name: "children sleep forever", script: "sleep 1000000 & sleep 1000000 & wait", err: "timed out"},
		{name: "writes without bound", script: `head -c 64M /dev/zero > "${TMPDIR:-/tmp}/themis-fake-$$"; echo "status $?"; wc -c < "${TMPDIR:-/tmp}/themis-fake-$$"; rm -f "${TMPDIR:-/tmp}/themis-fake-$$"; exit 4`,
			check: func(t *testing.T, out string) {
				if !strings.Contains(out, "1048576") {
					t.Errorf("output %q: the file was not stopped at the 1 MiB RLIMIT_FSIZE", out)
				}
			}},
		{name: "allocates without bound", script: `exec perl -e '$x = "a" x (2 << 30); print length($x)'`,
			check: func(t *testing.T, out string) {
				if !strings.Contains(out, "Out of memory") {
					t.Errorf("output %q: the allocation was not stopped by RLIMIT_AS", out)
				}
			}},
		{name: "crashes", script: `exec perl -e 'unpack("p", pack("L!", 1))'`, err: "SIGSEGV"},
		{name: "floods its output", script: "head -c 10M /dev/zero | tr '\\0' x; exit 4",
			check: func(t *testing.T, out string) {
				if len(out) > 70<<10 {
					t.Errorf("kept %d bytes of output, want at most 64 KiB and a mark", len(out))
				}
			}},
		{name: "reads /etc/shadow", script: "cat /etc/shadow && exit 0; exit 8", isolated: true,
			check: func(t *testing.T, out string) {
				if strings.Contains(out, "root:") {
					t.Errorf("the checker read the host's /etc/shadow: %q", out)
				}
			}},
		{name: "writes outside", script: "echo pwned > " + outside + "; echo pwned > \"$1\"; exit 4", isolated: true,
			check: func(t *testing.T, out string) {
				if _, err := os.Stat(outside); err == nil {
					t.Errorf("the checker wrote %s on the host", outside)
				}
			}},
		{name: "the network", script: "cat /sys/class/net/*/address 2>/dev/null; ls /sys/class/net 2>&1; exit 4", isolated: true,
			check: func(t *testing.T, out string) {
				if strings.Contains(out, "eth") {
					t.Errorf("the checker sees the host's network: %q", out)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if strings.Contains(tt.script, "perl") {
				if _, err := os.Stat("/usr/bin/perl"); err != nil {
					t.Skip("no /usr/bin/perl")
				}
			}
			image := filepath.Join(t.TempDir(), "lane.img")
			if err := os.WriteFile(image, []byte("not a filesystem"), 0o600); err != nil {
				t.Fatal(err)
			}
			tool := fakeTool(t, tt.script)
			if tt.timeout > 0 {
				tool.Limits.Timeout = tt.timeout
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			done := make(chan struct{})
			var (
				verdict Verdict
				out     []byte
				err     error
			)
			go func() {
				defer close(done)
				verdict, out, err = tool.Run(ctx, image)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("check still running after 20s (a hung checker hangs the run)")
			}
			t.Logf("%v: verdict %d, err %v, %d bytes of output", time.Since(start).Round(time.Millisecond), verdict, err, len(out))
			if tt.isolated && !sandbox.Isolated() {
				t.Skipf("no namespaces here (%s): only the timeout and limits hold", sandbox.Why())
			}
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("err = %v, want a verdict", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("err = %v, want one containing %q", err, tt.err)
			}
			if tt.check != nil {
				tt.check(t, string(out))
			}
			if got, rerr := os.ReadFile(image); rerr != nil || string(got) != "not a filesystem" {
				t.Errorf("image after the check: %q, %v; want it untouched", got, rerr)
			}
		})
	}
}

// TestRealChecker runs the real e2fsck and btrfs check in the sandbox over
// fresh images: clean, and (ext2) broken once the superblock magic goes.
func TestRealChecker(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fs, mkfs string
		size     int64
		wreck    int64 // offset zeroed to break it; -1 none
		want     Verdict
	}{
		{"ext2", "mkfs.ext2", 8 << 20, -1, Clean},
		{"ext2", "mkfs.ext2", 8 << 20, 1024 + 56, Broken},
		{"btrfs", "mkfs.btrfs", 128 << 20, -1, Clean},
		{"xfs", "mkfs.xfs", 300 << 20, -1, Clean},
		{"xfs", "mkfs.xfs", 300 << 20, 0, Dirty}, // primary superblock magic: the secondaries are found
		{"exfat", "mkfs.exfat", 16 << 20, -1, Clean},
		{"exfat", "mkfs.exfat", 16 << 20, 11 * 512, Dirty}, // the boot region's checksum
		{"exfat", "mkfs.exfat", 16 << 20, 3, Broken},       // its file system name
		{"f2fs", "mkfs.f2fs", 64 << 20, -1, Clean},
		{"minix", "mkfs.minix", 8 << 20, -1, Clean},
	} {
		tool, err := For(tt.fs)
		if err != nil {
			t.Fatal(err)
		}
		mkfs, err := exec.LookPath(tt.mkfs)
		if err != nil || tool.Installed() != nil {
			t.Logf("skip %s: %s or its checker not installed", tt.fs, tt.mkfs)
			continue
		}
		image := filepath.Join(t.TempDir(), "lane.img")
		if err := os.WriteFile(image, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(image, tt.size); err != nil {
			t.Fatal(err)
		}
		quiet := []string{"-q"}
		switch tt.fs {
		case "exfat", "minix":
			quiet = nil // no -q
		}
		if out, err := exec.Command(mkfs, append(quiet, image)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", tt.mkfs, err, out)
		}
		if tt.wreck >= 0 {
			f, err := os.OpenFile(image, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0, 0}, tt.wreck); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		got, out, err := tool.Run(context.Background(), image)
		if err != nil || got != tt.want {
			t.Errorf("%s (wreck %d): verdict %d, %v, want %d; output:\n%s", tool.Name, tt.wreck, got, err, tt.want, out)
		}
		if strings.Contains(string(out), "/image") {
			t.Errorf("output names the sandbox's path: %s", out)
		}
	}
}
