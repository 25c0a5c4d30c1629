package nbd

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/overlay"
	"go.uber.org/zap/zaptest"
)

// qemuIO returns the path of qemu-io, skipping the test when it is missing
// unless THEMIS_REQUIRE_QEMU=1.
func qemuIO(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-io")
	if err != nil {
		if os.Getenv("THEMIS_REQUIRE_QEMU") == "1" {
			t.Fatalf("qemu-io not found and THEMIS_REQUIRE_QEMU=1: %v", err)
		}
		t.Skipf("qemu-io not on PATH (install Debian qemu-utils): %v", err)
	}
	return p
}

// TestQEMU drives the server with QEMU's own NBD client (qemu-io), over an
// overlay.Device backend, through both the URI and the --image-opts syntax.
func TestQEMU(t *testing.T) {
	qio := qemuIO(t)
	t.Parallel()
	for _, tc := range []struct {
		name   string
		export string
		target func(sock string) []string
	}{
		{
			name: "uri default export",
			target: func(sock string) []string {
				return []string{"-f", "raw", "nbd+unix:///?socket=" + sock}
			},
		},
		{
			name:   "uri named export",
			export: "disk0",
			target: func(sock string) []string {
				return []string{"-f", "raw", "nbd+unix:///disk0?socket=" + sock}
			},
		},
		{
			name:   "image opts",
			export: "disk0",
			target: func(sock string) []string {
				return []string{"--image-opts", "driver=nbd,server.type=unix,server.path=" + sock + ",export=disk0"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const size = 4 << 20
			base := bytes.Repeat([]byte{0xaa}, size)
			dev, err := overlay.New(bytes.NewReader(base), size)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := dev.Close(); err != nil {
					t.Error(err)
				}
			})
			sock := filepath.Join(shortTempDir(t), "nbd.sock")
			l, err := Listen(sock)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			served := make(chan error, 1)
			go func() {
				served <- (&Server{Backend: dev, Name: tc.export, Log: zaptest.NewLogger(t)}).Serve(ctx, l)
			}()

			args := []string{
				"-c", "write -P 0x55 4096 8192",
				"-c", "read -P 0x55 4096 8192",
				"-c", "write -z 65536 65536",
				"-c", "read -P 0 65536 65536",
				"-c", "write -P 0x11 1000 100", // unaligned: the client or server does read-modify-write
				"-c", "read -P 0x11 1000 100",
				"-c", "flush",
				"-c", "read -P 0xaa 131072 4096",
			}
			args = append(args, tc.target(sock)...)
			cmd := exec.CommandContext(ctx, qio, args...)
			out, err := cmd.CombinedOutput()
			t.Logf("qemu-io %s:\n%s", strings.Join(args, " "), out)
			if err != nil {
				t.Fatalf("qemu-io: %v", err)
			}
			if s := string(out); strings.Contains(s, "failed") || strings.Contains(s, "error") {
				t.Fatalf("qemu-io reported a failure")
			}
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve = %v", err)
			}

			want := bytes.Clone(base)
			copy(want[4096:4096+8192], bytes.Repeat([]byte{0x55}, 8192))
			clear(want[65536 : 65536+65536])
			copy(want[1000:1100], bytes.Repeat([]byte{0x11}, 100))
			var got bytes.Buffer
			if _, err := dev.WriteTo(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				for i := range want {
					if got.Bytes()[i] != want[i] {
						t.Fatalf("backend differs from expected at byte %d: %#x, want %#x", i, got.Bytes()[i], want[i])
					}
				}
			}
		})
	}
}
