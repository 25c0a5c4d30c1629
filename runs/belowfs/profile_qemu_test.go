package belowfs

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/themisfs/themis/session"
	"github.com/themisfs/themis/session/sessiontest"
)

// TestProfileRealGuest reproduces the paper's Table 2 rows on ext2 in the
// real guest and checks that the layout inferred from the writes agrees
// with the layout parsed from the image.
func TestProfileRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows := map[string]ProfileRow{}
	sum, err := Profile(ctx, m, ProfileOptions{}, func(r ProfileRow) {
		t.Logf("%-5s %-24s bytes %-8d written %-5d read %-4d (baseline %d) amp %8.1f errno %d %v",
			r.Lane, r.Op, r.Bytes, r.SectorsWritten, r.SectorsRead, r.MountBaselineRead, r.Amplification, r.Errno, r.Written)
		rows[r.Op] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("profile: %d rows in %s", sum.Rows, sum.Elapsed)
	defaults := append(append([]string(nil), DefaultProfileOps...), DefaultProfileReadOps...)
	if sum.Rows != len(defaults) {
		t.Errorf("rows = %d, want %d", sum.Rows, len(defaults))
	}
	for _, op := range defaults {
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

// TestProfileWalkRealGuest measures Table 4's ls and find rows on ext2 in
// the real guest: ls of a directory of 300 files reads the directory's
// blocks and inode-table blocks (past the ones the mount's inode readahead
// already read), find over the nested tree reads every directory of it and
// more than ls of the same directory, and neither writes anything.
func TestProfileWalkRealGuest(t *testing.T) {
	m := sessiontest.Real(t, session.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const files, entries = 300, 40
	rows := map[string]ProfileRow{}
	_, err := Profile(ctx, m, ProfileOptions{LsFiles: files, TreeEntries: entries,
		Ops: []string{"ls dir", "ls tree", "find tree", "find /", "ls nope"}}, func(r ProfileRow) {
		t.Logf("%-10s entries %-4d read %-4d (baseline %d) written %d errno %d %v", r.Op, r.Entries, r.SectorsRead, r.MountBaselineRead, r.SectorsWritten, r.Errno, r.Read)
		rows[r.Op] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	// Sectors of the read runs, by owner path and by region.
	byPath := func(r ProfileRow) map[string]uint64 {
		out := map[string]uint64{}
		for _, x := range r.Read {
			out[x.Path] += x.Count
		}
		return out
	}
	byRegion := func(r ProfileRow) map[string]uint64 {
		out := map[string]uint64{}
		for _, x := range r.Read {
			out[x.Region] += x.Count
		}
		return out
	}
	for _, op := range []string{"ls dir", "ls tree", "find tree", "find /"} {
		r := rows[op]
		if r.Errno != 0 || r.SectorsWritten != 0 || r.MountBaselineRead == 0 {
			t.Errorf("%s: %+v, want errno 0, nothing written, a mount baseline", op, r)
		}
		// The read runs are the window's sectors beyond the bare mount's:
		// as many as the count minus the baseline, give or take a sector
		// the remount read differently.
		var n uint64
		for _, x := range r.Read {
			n += x.Count
		}
		if d := int(n) - r.SectorsRead; d < -4 || d > 4 {
			t.Errorf("%s: read runs hold %d sectors, the count says %d", op, n, r.SectorsRead)
		}
	}

	ls := rows["ls dir"]
	if ls.Entries != files {
		t.Errorf("ls dir: %d entries, want %d", ls.Entries, files)
	}
	// 300 entries of 12 bytes are more than 3 KiB: at least 4 blocks of 1 KiB.
	if got := byPath(ls)["/dir"]; got < 8 {
		t.Errorf("ls dir: %d sectors of /dir's blocks read, want >= 8: %v", got, ls.Read)
	}
	if got := byRegion(ls)["inode-table"]; got == 0 {
		t.Errorf("ls dir: no inode-table sector read: %v", ls.Read)
	}

	find, lsTree := rows["find tree"], rows["ls tree"]
	if find.Entries != entries {
		t.Errorf("find tree: %d entries, want %d", find.Entries, entries)
	}
	if find.SectorsRead <= lsTree.SectorsRead {
		t.Errorf("find tree read %d sectors, ls tree %d: want find above ls", find.SectorsRead, lsTree.SectorsRead)
	}
	dirs := []string{"/tree"}
	for _, op := range ProfileTree(0, entries) {
		if p, ok := strings.CutPrefix(op, "mkdir tree/"); ok {
			dirs = append(dirs, "/tree/"+strings.Fields(p)[0])
		}
	}
	got := byPath(find)
	for _, d := range dirs {
		if got[d] == 0 {
			t.Errorf("find tree: no block of %s read: %v", d, find.Read)
		}
	}
	if got := byPath(lsTree); got["/tree/d0"] != 0 {
		t.Errorf("ls tree read a block of a subdirectory: %v", lsTree.Read)
	}
	if all := rows["find /"]; all.Entries <= int64(files+entries) || all.SectorsRead <= find.SectorsRead || byPath(all)["/lost+found"] == 0 {
		t.Errorf("find /: %+v, want more entries and sectors than find tree, and lost+found's blocks", all)
	}
	if r := rows["ls nope"]; r.Errno != int32(syscall.ENOENT) {
		t.Errorf("ls nope: errno %d, want ENOENT", r.Errno)
	}
}
