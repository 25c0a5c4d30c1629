package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
)

// newFindingsExport is `themisctl findings export`.
func newFindingsExport(g *globals) *cobra.Command {
	var out, policy, fst, fstLane, fstName string
	cmd := &cobra.Command{
		Use:   "export FINDING",
		Short: "Write a standalone reproducer of a finding (repro.c, repro.sh, README; a crash finding: crash.img, check.sh, README, trace.txt) that runs without Themis",
		Long: "Write a directory a kernel developer runs as root on any Linux with loop devices and the lanes' mkfs tools:\n" +
			"repro.sh makes the base images with the exact mkfs commands, loop-mounts them, builds and runs repro.c\n" +
			"(the trace as plain syscalls) and prints what each lane returned, the state it left, and expected vs observed.\n" +
			"Exit status of repro.sh: 0 reproduced, 1 not on this kernel, 2 could not run, 3 a filesystem this kernel cannot mount.\n\n" +
			"A crash finding exports its crash state instead: a fresh session replays the setup and trace and writes the disk the\n" +
			"crash leaves as crash.img (sparse); check.sh replays its journal on a copy where the host can and runs the checker\n" +
			"(exit 0 reproduced, 1 clean, 2 could not run; no root needed), both sandboxed (as root: as user nobody, in namespaces);\n" +
			"check.sh --mount --untrusted-ok mounts the copy instead, which runs the host kernel's driver on the guest's bytes: do it\n" +
			"in a throwaway VM. README says how it was made and what the sandbox is; trace.txt holds the ops.\n\n" +
			"A kernel finding exports repro.c, repro.sh and README too, with the kernel's report; its repro.sh crashes the kernel\n" +
			"it runs on: it runs only as repro.sh --in-vm, inside a throwaway VM, and exits 0 when the kernel logged a fault report.\n\n" +
			"--fstests DIR writes the finding as an fstests test instead (tests/<fs>/NNN and NNN.out; ext2/3/4 in ext4/, a filesystem\n" +
			"without a directory there in generic/): the lane's mkfs options, the trace as shell, xfs_io and perl commands on\n" +
			"$SCRATCH_MNT, and a golden output from the expected behaviour: the other lane's errno or state value for an errno or state\n" +
			"divergence, the model's for a remount (_scratch_cycle_mount) or fsck self-reference and a crash finding (dm-flakey:\n" +
			"_flakey_drop_and_remount, where its state is every write up to the trace's end); so it fails on a kernel with the bug.\n" +
			"A kernel finding is not exported as fstests (it crashes the machine the suite runs on), nor a torn or reordered crash\n" +
			"state; the error says why. In a checkout, run make (group.list) and ./check DIR/NNN.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFindingID("FINDING", args[0]); err != nil {
				return err
			}
			if fst != "" {
				if out != "" || policy != "" {
					return errors.New("--fstests: not with --out or --policy (the test goes into DIR's tests/; its expectation is the reference lane's or the model's)")
				}
				return g.withConn(cmd, func(ctx context.Context, c *conn) error {
					return exportFSTests(ctx, c, args[0], fst, fstLane, fstName, g.json)
				})
			}
			if fstLane != "" || fstName != "" {
				return errors.New("--fstests-lane and --fstests-name go with --fstests DIR")
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				dir, err := exportDir(args[0], out)
				if err != nil {
					return err
				}
				sum, err := exportTo(ctx, c, &themisv1.ExportRequest{FindingId: args[0], Policy: policy}, dir)
				if err != nil {
					return err
				}
				if g.json {
					return writeProtoJSON(&themisv1.ExportResult{Dir: dir, Summary: sum})
				}
				names := strings.Join(sum.GetFiles(), ",")
				switch sum.GetKind() {
				case "crash":
					fmt.Printf("wrote %s/{%s}; run: %s\n", dir, names, filepath.Join(dir, "check.sh"))
				case "kernel":
					fmt.Printf("wrote %s/{%s}; it crashes the kernel: run it only inside a throwaway VM: sudo %s --in-vm\n", dir, names, filepath.Join(dir, "repro.sh"))
				default:
					fmt.Printf("wrote %s/{%s}; run: sudo %s\n", dir, names, filepath.Join(dir, "repro.sh"))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write (default: ./FINDING): made if missing, else it must be an empty directory, not a symlink; nothing in it is replaced")
	cmd.Flags().StringVar(&fst, "fstests", "", "write the finding as an fstests test instead, into DIR's tests/<fs or generic>/NNN and NNN.out (DIR an fstests checkout, or a directory to lay the suite's tests/ out in); nothing is replaced")
	cmd.Flags().StringVar(&fstLane, "fstests-lane", "", "with --fstests: the lane the test runs as, a spec or a lane name (default: the finding's first); the golden output is the other lane's result")
	cmd.Flags().StringVar(&fstName, "fstests-name", "", "with --fstests: the test's name DIR/NNN (default: the lane's filesystem's directory, ext4 for ext2/3/4, else generic; the first number free there, as fstests' tools/nextid picks it)")
	cmd.Flags().StringVar(&policy, "policy", "", "canonicalization of the state listing (default: the one the finding was judged under; auto for findings that did not record it; exact, metis, overlay, overlay-dirs)")
	return cmd
}

// exportTo makes the Export call req on the daemon and writes its files
// and crash image into dir (made, or empty), returning the summary.
func exportTo(ctx context.Context, c *conn, req *themisv1.ExportRequest, dir string) (sum *themisv1.ExportSummary, err error) {
	progress("exporting " + req.GetFindingId() + " (the daemon replays it where the reproducer needs it)")
	root, err := openExportDir(dir)
	if err != nil {
		return nil, err
	}
	return exportInto(ctx, c, req, root, false)
}

// exportInto makes the Export call req on the daemon and writes its files
// and crash image under root (each new: none replaced), returning the
// summary; root is closed at the end. On an error, undo removes the files
// it made.
func exportInto(ctx context.Context, c *conn, req *themisv1.ExportRequest, root *os.Root, undo bool) (sum *themisv1.ExportSummary, err error) {
	w := newExportWriter(root)
	defer func() {
		if err != nil && undo {
			w.remove()
		}
		if cerr := w.close(); err == nil && cerr != nil {
			err = fmt.Errorf("--out: %w", cerr)
		}
	}()
	stream, err := c.Export(ctx, req)
	if err != nil {
		return nil, err
	}
	err = client.Drain(stream.Recv, func(m *themisv1.ExportResponse) error {
		switch {
		case m.GetFile() != nil:
			return w.file(m.GetFile())
		case m.GetImage() != nil:
			return w.image(m.GetImage())
		case m.GetSummary() != nil:
			sum = m.GetSummary()
		}
		return nil
	})
	if err == nil && sum == nil {
		err = errors.New("export: the daemon ended the stream without a summary")
	}
	if err == nil && sum.GetFindingId() != req.GetFindingId() {
		err = fmt.Errorf("export: the daemon exported %q, not %q", sum.GetFindingId(), req.GetFindingId())
	}
	if err == nil {
		err = w.finish(sum.GetFiles())
	}
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// findingIDPattern is a finding id's grammar (session.NewFindingID): an
// export makes it a path and prints it into scripts.
var findingIDPattern = regexp.MustCompile(`^f-[0-9a-f]{1,64}$`)

// checkFindingID refuses an id that is not a finding id; what names where
// it came from.
func checkFindingID(what, id string) error {
	if !findingIDPattern.MatchString(id) {
		return fmt.Errorf("%s %q: not a finding id (f- and hex digits)", what, id)
	}
	return nil
}

// exportDir is where finding id's export goes: out, or ./ID. The id is
// checked to be a finding id first: it becomes a path.
func exportDir(id, out string) (string, error) {
	if err := checkFindingID("FINDING", id); err != nil {
		return "", err
	}
	if out == "" {
		return id, nil
	}
	return out, nil
}

// openExportDir makes dir (its parent too if missing, 0755) and opens it
// as a root the export writes under. An existing dir must be an empty
// directory, not a symlink: an export replaces nothing and follows no
// link planted where it writes.
func openExportDir(dir string) (*os.Root, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("--out: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("--out %s: a symlink; an export writes into a directory it makes, or an empty one", dir)
	case !fi.IsDir():
		return nil, fmt.Errorf("--out %s: not a directory", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	if err := checkEmptyRoot(root, fi, dir); err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// checkEmptyRoot refuses a root that is not the directory lstat'ed as fi
// (swapped in between) or that holds anything.
func checkEmptyRoot(root *os.Root, fi fs.FileInfo, dir string) error {
	now, err := root.Stat(".")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if !os.SameFile(fi, now) {
		return fmt.Errorf("--out %s: replaced while it was opened", dir)
	}
	d, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	names, err := d.Readdirnames(1)
	if cerr := d.Close(); err == nil || errors.Is(err, io.EOF) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if len(names) > 0 {
		return fmt.Errorf("--out %s: not empty (holds %q); an export writes into a directory it makes, or an empty one", dir, names[0])
	}
	return nil
}
