package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest"
)

// fstestsDirs are the directories of tests/ an fstests checkout has for
// one filesystem (ext4's holds ext2's and ext3's: check runs them for
// those too); a filesystem without one gets generic/.
var fstestsDirs = map[string]string{"ext2": "ext4", "ext3": "ext4", "ext4": "ext4", "xfs": "xfs", "btrfs": "btrfs", "f2fs": "f2fs", "udf": "udf"}

// fstestsTestName is --fstests-name's grammar: DIR/NNN.
var fstestsTestName = regexp.MustCompile(`^([a-z0-9_]+)/([0-9]{3,})$`)

// fstestsNumbered is a test's file name in tests/DIR: its number, a name
// after it, its golden output's .out.
var fstestsNumbered = regexp.MustCompile(`^([0-9]{3,})(?:-[A-Za-z0-9-]+)?(?:\.out.*)?$`)

// fstestsTarget is where finding f's test goes under root (an fstests
// checkout when it has ./check and common/, else a directory to lay the
// suite's tests/ out in): the test's name DIR/NNN and the directory it is
// written in. name ("" none) is --fstests-name; else DIR is the lane's
// filesystem's (fstestsDirs) and NNN the first number tests/DIR does not
// use (as the suite's tools/nextid picks it), 001 in a new one.
func fstestsTarget(root, fsName, name string) (test, dir string, err error) {
	group, num := "", ""
	if name != "" {
		m := fstestsTestName.FindStringSubmatch(name)
		if m == nil {
			return "", "", fmt.Errorf("--fstests-name %q: want DIR/NNN (generic/999, ext4/123)", name)
		}
		group, num = m[1], m[2]
	} else if group = fstestsDirs[fsName]; group == "" {
		group = "generic"
	}
	dir = filepath.Join(root, "tests", group)
	if num == "" {
		if num, err = nextTestNumber(dir); err != nil {
			return "", "", err
		}
	}
	for _, f := range []string{num, num + ".out"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return "", "", fmt.Errorf("--fstests: %s exists: nothing is replaced (--fstests-name another)", filepath.Join(dir, f))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("--fstests: %w", err)
		}
	}
	return group + "/" + num, dir, nil
}

// nextTestNumber is the first number from 1 that no test in dir has, three
// digits at least; 001 where dir does not exist.
func nextTestNumber(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("--fstests: %w", err)
	}
	used := map[int]bool{}
	for _, e := range ents {
		if m := fstestsNumbered.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			used[n] = true
		}
	}
	n := 1
	for used[n] {
		n++
	}
	return fmt.Sprintf("%03d", n), nil
}

// isFSTestsCheckout says whether dir is an fstests checkout: ./check and
// common/ in it.
func isFSTestsCheckout(dir string) bool {
	c, err1 := os.Stat(filepath.Join(dir, "check"))
	d, err2 := os.Stat(filepath.Join(dir, "common"))
	return err1 == nil && err2 == nil && c.Mode().IsRegular() && d.IsDir()
}

// exportFSTests writes finding id as an fstests test under root (a
// checkout, or a directory made with the suite's tests/ layout), run as
// lane ("" the finding's first), named name ("" the next free number of
// its filesystem's directory), and says how to run it.
func exportFSTests(ctx context.Context, c *conn, id, root, lane, name string, asJSON bool) error {
	fr, err := c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: id})
	if err != nil {
		return err
	}
	specs := fr.GetFinding().GetLaneSpecs()
	if len(specs) == 0 {
		return fmt.Errorf("finding %s has no lanes", id)
	}
	spec, err := laneOf(specs, lane)
	if err != nil {
		return err
	}
	test, dir, err := fstestsTarget(root, spec.FS, name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--fstests: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("--fstests: %w", err)
	}
	progress("exporting " + id + " as the fstests test " + test)
	sum, err := exportInto(ctx, c, &themisv1.ExportRequest{FindingId: id, Format: "fstests", FstestsTest: test, FstestsLane: lane}, r, true)
	if err != nil {
		return err
	}
	if asJSON {
		return writeProtoJSON(&themisv1.ExportResult{Dir: dir, Summary: sum, FstestsTest: test})
	}
	fmt.Printf("wrote %s/{%s,%s.out}\n", dir, filepath.Base(test), filepath.Base(test))
	if isFSTestsCheckout(root) {
		fmt.Printf("run it (FSTYP=%s, with a SCRATCH_DEV): cd %s && make -C tests/%s group.list && ./check %s\n", spec.FS, root, filepath.Dir(test), test)
	} else {
		fmt.Printf("copy tests/%s/%s* into an fstests checkout's tests/%s/, run make there, then ./check %s with FSTYP=%s\n", filepath.Dir(test), filepath.Base(test), filepath.Dir(test), test, spec.FS)
	}
	return nil
}

// laneOf is the lane of specs named by want (a spec or a lane name; ""
// the first).
func laneOf(specs []string, want string) (guest.LaneSpec, error) {
	for _, s := range specs {
		sp, err := guest.ParseLaneSpec(s)
		if err != nil {
			return guest.LaneSpec{}, fmt.Errorf("lane %q: %w", s, err)
		}
		if want == "" || s == want || sp.Name == want {
			return sp, nil
		}
	}
	return guest.LaneSpec{}, fmt.Errorf("--fstests-lane %q: not a lane of the finding (%v)", want, specs)
}
