package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report/ingest"
	"github.com/themisfs/themis/report/reporttest"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestReportRealGuest runs `themisctl report` end to end on ext2 against a
// daemon with the real guest, on a small budget (three write sizes, no
// metadata ops, two targets), and checks every figure has data: the parsed
// layout and the writes inside it, one point per write, one row per target
// with the paper's classes. Where Chromium is installed, the page is also
// loaded in it.
func TestReportRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sock := startDaemon(t, bin, dir, env.CacheDir)

	page := filepath.Join(dir, "report.html")
	cmd := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "--json", "report", "--fs", "ext2", "-o", page,
		"--write-sizes", "1,4K,64K", "--metadata=false", "--target", "data:d/f:0:0", "--target", "superblock.magic")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("themisctl report in %s; stderr:\n%s", time.Since(start).Round(time.Second), stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var data themisv1.ReportPage
	if err := jsonout.DecodeInto(out, &data); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	r := ingest.FromPage(&data)

	// The data.
	if len(r.Layouts) != 1 || r.Layouts[0].Lane != "ext2" || len(r.Layouts[0].Parsed) < 5 || len(r.Layouts[0].Inferred) == 0 {
		t.Fatalf("layouts %+v, want ext2's parsed regions and written runs", r.Layouts)
	}
	kinds := map[string]bool{}
	for _, p := range r.Layouts[0].Parsed {
		kinds[p.Region] = true
	}
	for _, k := range []string{"superblock", "group-descriptors", "block-bitmap", "inode-bitmap", "inode-table", "data"} {
		if !kinds[k] {
			t.Errorf("parsed layout lacks %s: %v", k, kinds)
		}
	}
	if len(r.Profile) != 3 {
		t.Fatalf("profile rows %+v, want 3 writes", r.Profile)
	}
	prev := 0
	for _, row := range r.Profile {
		if row.Errno != 0 || row.SectorsWritten <= prev || row.SectorsWritten*512 < int(row.Bytes) {
			t.Errorf("row %+v: want a successful write of at least its bytes, more sectors than the smaller write (%d)", row, prev)
		}
		prev = row.SectorsWritten
	}
	classes := map[string]string{}
	for _, b := range r.Blast {
		classes[b.Target] = b.Class
	}
	if classes["data:d/f:0:0"] != "silent-content" || classes["superblock.magic"] != "fatal" || len(r.Blast) != 2 {
		t.Errorf("blast radius %v, want data:d/f:0:0 silent-content and superblock.magic fatal", classes)
	}

	// The page.
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fig, err := reporttest.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	m := fig.Layouts["ext2"]
	if m.Regions != len(r.Layouts[0].Parsed) || m.Runs != len(r.Layouts[0].Inferred) || m.RegionRows != m.Regions {
		t.Errorf("layout map %+v, want %d regions and %d written runs", m, len(r.Layouts[0].Parsed), len(r.Layouts[0].Inferred))
	}
	if fig.ChartPoints != 3 || fig.BlastRows != 2 || fig.BlastCells != 2 || fig.ProfileRows != 3 || fig.Scripts != 0 || len(fig.External) != 0 {
		t.Errorf("figures %+v: want 3 points, 2 blast rows, 3 profile rows, nothing external", fig)
	}
	if chromium, ok := reporttest.LookChromium(); ok {
		dom, err := reporttest.Parse(strings.NewReader(reporttest.DumpDOM(t, chromium, page)))
		if err != nil {
			t.Fatal(err)
		}
		if dom.ChartPoints != 3 || dom.BlastRows != 2 || dom.Layouts["ext2"].Runs != m.Runs {
			t.Errorf("in Chromium's DOM: %+v", dom)
		}
	}
}

// startDaemon runs this binary as the daemon on its own state dir under
// dir (not the race-instrumented test binary, which serves the disks
// several times slower), stopped when the test ends; it returns the
// socket once the daemon listens.
func startDaemon(t *testing.T, bin, dir, cacheDir string) string {
	t.Helper()
	sock := filepath.Join(dir, "d.sock")
	daemon := exec.Command(bin, "daemon", "--listen", "unix://"+sock, "--state-dir", filepath.Join(dir, "state"), "--cache-dir", cacheDir)
	var dlog bytes.Buffer
	daemon.Stdout, daemon.Stderr = &dlog, &dlog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		if err := daemon.Wait(); err != nil {
			t.Errorf("daemon: %v\n%s", err, dlog.Bytes())
		}
	})
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not listen on %s within a minute:\n%s", sock, dlog.Bytes())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return sock
}
