package export

import (
	"strings"
	"testing"

	"github.com/themisfs/themis/session"
)

// TestFSTestsFiles makes tests of stored findings: the lane each runs as,
// its mkfs options and the reference's expectation in the golden output.
func TestFSTestsFiles(t *testing.T) {
	t.Parallel()
	state := &session.Finding{ID: "f-1", Kind: "state-divergence", LaneSpecs: []string{"ext2:inode_size=128", "vfat"},
		Trace: []string{"create f 0644", "chmod f 0600"}, Path: "f", Field: "mode",
		Detail: "lanes ext2:inode_size=128 and vfat differ at f: mode 0600 != 0755 (did not reproduce when replayed from the root)",
		Lanes:  []session.LaneResult{{Lane: "ext2:inode_size=128"}, {Lane: "vfat"}}}
	errno := &session.Finding{ID: "f-2", Kind: "errno-divergence", LaneSpecs: []string{"ext4", "xfs"}, Trace: []string{"rmdir d"},
		Lanes: []session.LaneResult{{Lane: "ext4", Errno: 2}, {Lane: "xfs", Errno: 39}}}
	crash := &session.Finding{ID: "f-3", Kind: "crash", LaneSpecs: []string{"ext2"}, Trace: []string{"rename seed g", "fsync g"},
		Crash: &session.CrashPoint{Setup: []string{"create seed 0644"}, SetupSync: true, Keep: []int{0, 1}, Writes: 2, Flushes: 1, LogFlushes: 1,
			Durability: "LOST g: missing"}}
	tests := []struct {
		name  string
		f     *session.Finding
		o     Options
		files []string
		want  []string // in the script, then in the golden output
		out   string
		err   string
	}{
		{name: "state as ext2", f: state, o: Options{FSTestsTest: "ext4/010"}, files: []string{"010", "010.out"},
			want: []string{`[ "$FSTYP" = ext2 ]`, "_scratch_mkfs -I 128 >>", "from lane vfat"}, out: "step 2: ok\nmode: 0755\n"},
		{name: "state as vfat", f: state, o: Options{FSTestsTest: "generic/011", FSTestsLane: "vfat"}, files: []string{"011", "011.out"},
			want: []string{`[ "$FSTYP" = vfat ]`, "_scratch_mkfs >>", "from lane ext2:inode_size=128"}, out: "step 2: ok\nmode: 0600\n"},
		{name: "errno", f: errno, o: Options{FSTestsTest: "ext4/012"}, files: []string{"012", "012.out"},
			want: []string{`[ "$FSTYP" = ext4 ]`, "from lane xfs"}, out: "step 1: Directory not empty\n"},
		{name: "errno as xfs", f: errno, o: Options{FSTestsTest: "xfs/013", FSTestsLane: "xfs"}, files: []string{"013", "013.out"},
			want: []string{"-m crc=1,bigtime=1", "from lane ext4"}, out: "step 1: No such file or directory\n"},
		{name: "crash", f: crash, o: Options{FSTestsTest: "ext4/014"}, files: []string{"014", "014.out"},
			want: []string{"_flakey_drop_and_remount", "themis_op setup-1 "}, out: "the fsynced file is intact after the power cut\n"},
		{name: "no name", f: errno, err: "fstests_test"},
		{name: "not a lane", f: state, o: Options{FSTestsTest: "ext4/010", FSTestsLane: "xfs"}, err: `"xfs" is not a lane`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files, err := fstestsFiles(tc.f, tc.o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedNames(files); strings.Join(got, ",") != strings.Join(tc.files, ",") {
				t.Fatalf("files %v, want %v", got, tc.files)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(files[tc.files[0]]), w) {
					t.Errorf("script has no %q:\n%s", w, files[tc.files[0]])
				}
			}
			if !strings.HasSuffix(string(files[tc.files[1]]), tc.out) {
				t.Errorf("golden output:\n%s\nwant it to end in:\n%s", files[tc.files[1]], tc.out)
			}
		})
	}
}
