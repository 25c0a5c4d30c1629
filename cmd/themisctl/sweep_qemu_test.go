package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestSweepClockJSONRealGuest runs a small clock sweep on ext2 through a
// daemon: --json prints a themis.v1.SweepCell a line, and sweep merge
// reads those lines back and prints the same cells.
func TestSweepClockJSONRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sock := startDaemon(t, bin, t.TempDir(), env.CacheDir)
	out, err := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "--json", "sweep", "clock", "--fs", "ext2",
		"--values", "0,2147483648", "--ops", "create").Output()
	if err != nil {
		t.Fatalf("sweep clock: %v", err)
	}
	cells := sweepLines(t, out)
	if len(cells) != 2 {
		t.Fatalf("sweep clock --json: %d cells, want 2:\n%s", len(cells), out)
	}
	for _, c := range cells {
		if c.GetLane() != "ext2" || c.GetOp() != "create" || c.GetVerdict() == "" || c.GetGuest() == nil {
			t.Errorf("cell %v", c)
		}
	}
	if v := cells[1]; v.GetValue() != 2147483648 || v.GetGuest().GetSec() != 1<<31-1 {
		t.Errorf("2^31 on ext2 (128-byte inodes by default: clamped): %v", v)
	}
	shard := filepath.Join(t.TempDir(), "s0.jsonl")
	if err := os.WriteFile(shard, out, 0o644); err != nil {
		t.Fatal(err)
	}
	merged, err := exec.CommandContext(ctx, bin, "--json", "sweep", "merge", shard).Output()
	if err != nil {
		t.Fatalf("sweep merge: %v", err)
	}
	again := sweepLines(t, merged)
	if len(again) != len(cells) {
		t.Fatalf("sweep merge: %d cells, want %d", len(again), len(cells))
	}
	for i := range cells {
		if !proto.Equal(cells[i], again[i]) {
			t.Errorf("merged cell %d: %v, want %v", i, again[i], cells[i])
		}
	}
}

// sweepLines decodes JSON lines of SweepCells strictly.
func sweepLines(t *testing.T, out []byte) []*themisv1.SweepCell {
	t.Helper()
	msgs, err := jsonout.DecodeLines(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var cells []*themisv1.SweepCell
	for _, m := range msgs {
		c, ok := m.(*themisv1.SweepCell)
		if !ok {
			t.Fatalf("a %s, want a SweepCell", m.ProtoReflect().Descriptor().FullName())
		}
		cells = append(cells, c)
	}
	return cells
}
