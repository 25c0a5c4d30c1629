package session

import (
	"context"
	"testing"
	"time"

	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestProfileRealGuest reproduces the paper's Table 2 rows on ext2 in the
// real guest and checks that the layout inferred from the writes agrees
// with the layout parsed from the image.
func TestProfileRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	defer vmmtest.Leaks(t)()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := Open(ctx, Config{StateDir: t.TempDir(), CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rows := map[string]ProfileRow{}
	sum, err := m.Profile(ctx, ProfileOptions{}, func(r ProfileRow) {
		t.Logf("%-5s %-24s bytes %-8d written %-5d read %-4d (baseline %d) amp %8.1f errno %d %v",
			r.Lane, r.Op, r.Bytes, r.SectorsWritten, r.SectorsRead, r.MountBaselineRead, r.Amplification, r.Errno, r.Written)
		rows[r.Op] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("profile: %d rows in %s", sum.Rows, sum.Elapsed)
	if sum.Rows != len(DefaultProfileOps) {
		t.Errorf("rows = %d, want %d", sum.Rows, len(DefaultProfileOps))
	}
	for _, op := range DefaultProfileOps {
		if r, ok := rows[op]; !ok || r.Errno != 0 {
			t.Errorf("%s: %+v, want a row with errno 0", op, r)
		}
	}
	one := rows["write f 0 1 0x55"]
	if one.SectorsWritten <= 0 || len(one.Written) == 0 {
		t.Errorf("1-byte write: %+v, want sectors written", one)
	}
	data := false
	for _, w := range one.Written {
		if w.Region == "" {
			t.Errorf("1-byte write: unlabelled range %+v", w)
		}
		data = data || w.Region == "data"
	}
	if !data {
		t.Errorf("1-byte write: no data sector in %v", one.Written)
	}
	if r := rows["write f 0 1048576 0x55"]; r.SectorsWritten < 2048 {
		t.Errorf("1 MiB write: %d sectors written, want >= 2048", r.SectorsWritten)
	}
	if r := rows["chmod f 0600"]; r.SectorsWritten == 0 || r.SectorsWritten > 8 {
		t.Errorf("chmod: %d sectors written, want 1..8", r.SectorsWritten)
	}
	if r := rows["write f 0 65536 0x55"]; r.SectorsRead <= rows["chmod f 0600"].SectorsRead {
		t.Errorf("cold read of a 64 KiB file (%d sectors) not above a stat's (%d)", r.SectorsRead, rows["chmod f 0600"].SectorsRead)
	}

	// The two views of the layout agree: every inferred run lies inside a
	// parsed region of the same kind, and the writes saw the structures an
	// ext2 write must touch.
	parsed, inferred := sum.Layout["ext2"], sum.Inferred["ext2"]
	if len(parsed) == 0 || len(inferred) == 0 {
		t.Fatalf("layout: parsed %d regions, inferred %d", len(parsed), len(inferred))
	}
	kinds := map[string]bool{}
	for _, in := range inferred {
		kinds[in.Region] = true
		inside := false
		for _, p := range parsed {
			if p.Region == in.Region && p.First <= in.First && in.First+in.Count <= p.First+p.Count {
				inside = true
				break
			}
		}
		if !inside {
			t.Errorf("inferred %+v lies in no parsed %s region", in, in.Region)
		}
	}
	for _, k := range []string{"group-descriptors", "block-bitmap", "inode-bitmap", "inode-table", "data"} {
		if !kinds[k] {
			t.Errorf("no write seen in %s; inferred %v", k, inferred)
		}
	}
	t.Logf("parsed layout: %v", parsed)
	t.Logf("inferred layout: %v", inferred)
}
