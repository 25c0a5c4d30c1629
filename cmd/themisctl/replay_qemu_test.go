package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/themisfs/themis/vmm/vmmtest"
)

// TestReplayPassesRealGuest runs a trace four times from one checkpoint
// with the guest clock pinned: on ext2 (whole seconds, no new inode, so no
// random generation number) the passes leave the same disk — all four on
// a quiet host (docs/replay.md); an op that a loaded host delays past the
// pinned second stamps the next one, so the test asks for fewer distinct
// disks than passes — and the QEMU backend hashes RAM.
func TestReplayPassesRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	bin := themisctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sock := startDaemon(t, bin, t.TempDir(), env.CacheDir)
	out, err := exec.CommandContext(ctx, bin, "--addr", "unix://"+sock, "--json", "replay", "--passes", "4", "--clock", "pinned",
		"--fs", "ext2:seed=1", "--trace", "write f-00 0 4096 0x55; chmod f-00 0600; truncate f-01 100").Output()
	if err != nil {
		t.Fatalf("replay --passes: %v", err)
	}
	var r passesResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%+v", r)
	if len(r.Rows) != 1 || r.Rows[0].Clock != "pinned" || r.Rows[0].Passes != 4 || r.Rows[0].Disks["ext2:seed=1"] < 1 || r.Rows[0].Disks["ext2:seed=1"] >= 4 || r.Rows[0].RAM < 1 {
		t.Errorf("rows %+v: want one pinned row, fewer distinct ext2 disks than 4 passes, RAM hashed", r.Rows)
	}
}
