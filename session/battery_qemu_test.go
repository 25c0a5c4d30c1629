package session

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/opspec"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// TestBatteryRealGuest is the paper's state-space battery (Table 7) run end
// to end on the real guest (QEMU), on an ext2 and an ext4 lane of one
// session: the hardlink nlink trajectory, a 255-byte name, commutativity
// (chmod;chown commute, write;truncate do not) and the six errno paths. The
// session forks once at the start and every sub-test restores that
// checkpoint, so each starts from the same empty lanes.
func TestBatteryRealGuest(t *testing.T) {
	env := vmmtest.Setup(t) // skips in -short; fails under CI=true without a guest
	check := vmmtest.Leaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := Open(ctx, Config{MakeBase: baseimage.Make, StateDir: t.TempDir(), CacheDir: env.CacheDir, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		check()
	}()
	lanes := []string{"ext2", "ext4"}
	in, err := m.Create(ctx, CreateOptions{Lanes: lanes})
	if err != nil {
		t.Fatal(err)
	}
	sid := in.ID
	if _, err := m.Fork(ctx, sid, "empty", OriginManual); err != nil {
		t.Fatal(err)
	}
	restore := func(t *testing.T, ref string) {
		t.Helper()
		if _, _, err := m.Restore(ctx, sid, ref); err != nil {
			t.Fatalf("restore %s: %v", ref, err)
		}
	}
	// do applies one opspec short-form op on every lane and returns the
	// result per lane, in lane order.
	do := func(t *testing.T, short string) []LaneResult {
		t.Helper()
		op, err := opspec.Parse(short)
		if err != nil {
			t.Fatal(err)
		}
		req, err := opspec.Request(op)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Apply(ctx, sid, req)
		if err != nil {
			t.Fatalf("%s: %v", short, err)
		}
		if len(res) != len(lanes) {
			t.Fatalf("%s: %d results, want one per lane (%d)", short, len(res), len(lanes))
		}
		return res
	}
	// want checks every lane returned errno for short.
	want := func(t *testing.T, short string, errno syscall.Errno) {
		t.Helper()
		for i, r := range do(t, short) {
			if r.Errno != int32(errno) {
				t.Errorf("%s on %s: errno %d (%v: %s), want %d (%v)", short, lanes[i], r.Errno, syscall.Errno(r.Errno), r.Error, int32(errno), errno)
			}
		}
	}
	nlink := func(t *testing.T, path string, wantN uint64) {
		t.Helper()
		var got []uint64
		for _, lane := range lanes {
			st, res, err := m.Stat(ctx, sid, lane, path, false)
			if err != nil {
				t.Fatal(err)
			}
			if res.Errno != 0 {
				t.Fatalf("stat %s on %s: errno %d %s", path, lane, res.Errno, res.Error)
			}
			got = append(got, st.GetNlink())
		}
		for _, n := range got {
			if n != wantN {
				t.Errorf("nlink of %s: %v on lanes %v, want %d on every lane", path, got, lanes, wantN)
				break
			}
		}
	}
	roots := func(t *testing.T) map[string][]byte {
		t.Helper()
		fps, err := m.Fingerprint(ctx, sid, agentv1.TimeMode_TIME_MODE_NONE, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := make(map[string][]byte, len(fps))
		for _, f := range fps {
			out[f.Lane] = f.Root
		}
		return out
	}

	t.Run("HardlinkNlink", func(t *testing.T) {
		restore(t, "empty")
		want(t, "create f-00", 0)
		nlink(t, "f-00", 1)
		for i, name := range []string{"f-01", "f-02", "f-03"} {
			want(t, "link f-00 "+name, 0)
			nlink(t, "f-00", uint64(i+2))
			nlink(t, name, uint64(i+2))
		}
		want(t, "unlink f-03", 0)
		nlink(t, "f-00", 3)
		want(t, "unlink f-02", 0)
		nlink(t, "f-00", 2)
		nlink(t, "f-01", 2)
	})

	t.Run("NameLength", func(t *testing.T) {
		restore(t, "empty")
		long := strings.Repeat("n", 255)
		want(t, "create "+long, 0)
		nlink(t, long, 1)
		want(t, "mkdir "+strings.Repeat("d", 255), 0)
	})

	t.Run("NameTooLong", func(t *testing.T) {
		restore(t, "empty")
		long := strings.Repeat("n", 255)
		for _, op := range []string{"create " + long + "x", "mkdir " + long + "x"} {
			for i, r := range do(t, op) {
				if r.Errno != int32(syscall.ENAMETOOLONG) {
					t.Errorf("256-byte %s on %s: errno %d (%v: %s), want ENAMETOOLONG", strings.Fields(op)[0], lanes[i], r.Errno, syscall.Errno(r.Errno), r.Error)
				}
			}
		}
	})

	t.Run("Commutativity", func(t *testing.T) {
		restore(t, "empty")
		want(t, "create f-00", 0)
		want(t, "write f-00 0 4096 0x55", 0)
		if _, err := m.Fork(ctx, sid, "file", OriginManual); err != nil {
			t.Fatal(err)
		}
		// run applies seq from the "file" checkpoint and returns the roots.
		run := func(t *testing.T, seq ...string) map[string][]byte {
			t.Helper()
			restore(t, "file")
			for _, s := range seq {
				want(t, s, 0)
			}
			return roots(t)
		}
		a := run(t, "chmod f-00 600", "chown f-00 1000")
		b := run(t, "chown f-00 1000", "chmod f-00 600")
		c := run(t, "write f-00 0 100 0xff", "truncate f-00 10")
		d := run(t, "truncate f-00 10", "write f-00 0 100 0xff")
		for _, lane := range lanes {
			if !bytes.Equal(a[lane], b[lane]) {
				t.Errorf("%s: chmod;chown root %x, chown;chmod root %x: want equal (they commute)", lane, a[lane], b[lane])
			}
			if bytes.Equal(c[lane], d[lane]) {
				t.Errorf("%s: write;truncate and truncate;write both give root %x: want different", lane, c[lane])
			}
		}
		if len(a) != len(lanes) || len(c) != len(lanes) {
			t.Errorf("roots for lanes %v and %v, want %v", a, c, lanes)
		}
	})

	t.Run("ErrnoPaths", func(t *testing.T) {
		restore(t, "empty")
		want(t, "mkdir d-00", 0)
		want(t, "create d-00/f-00", 0)
		want(t, "create f-00", 0)
		for _, c := range []struct {
			op    string
			errno syscall.Errno
		}{
			{"rmdir d-00", syscall.ENOTEMPTY},
			{"rmdir f-00", syscall.ENOTDIR},
			{"unlink f-09", syscall.ENOENT},
			{"rename f-09 f-08", syscall.ENOENT},
			{"link f-09 f-08", syscall.ENOENT},
			{"mkdir d-00", syscall.EEXIST},
		} {
			want(t, c.op, c.errno)
		}
		// The failed ops left the state as it was.
		before := roots(t)
		restore(t, "empty")
		want(t, "mkdir d-00", 0)
		want(t, "create d-00/f-00", 0)
		want(t, "create f-00", 0)
		after := roots(t)
		for _, lane := range lanes {
			if !bytes.Equal(before[lane], after[lane]) {
				t.Errorf("%s: root after the failed ops %x, without them %x", lane, before[lane], after[lane])
			}
		}
	})
}
