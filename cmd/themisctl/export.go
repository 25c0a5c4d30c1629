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
	"runtime/debug"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/repro"
)

// newFindingsExport is `themisctl findings export`.
func newFindingsExport(g *globals) *cobra.Command {
	var out, policy string
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
			"it runs on: it runs only as repro.sh --in-vm, inside a throwaway VM, and exits 0 when the kernel logged a fault report.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFindingID("FINDING", args[0]); err != nil {
				return err
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				fr, err := c.GetFinding(ctx, &themisv1.GetFindingRequest{FindingId: args[0]})
				if err != nil {
					return err
				}
				dir, err := exportDir(fr.GetFinding(), out)
				if err != nil {
					return err
				}
				if fr.GetFinding().GetCrash() != nil {
					return exportCrashCmd(ctx, g, c, fr.GetFinding(), dir)
				}
				files, err := exportFinding(ctx, g, c, fr.GetFinding(), policy)
				if err != nil {
					return err
				}
				root, err := openExportDir(dir)
				if err != nil {
					return err
				}
				err = writeExport(root, files)
				if cerr := root.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				if g.json {
					return writeJSON(os.Stdout, map[string]any{"finding": fr.GetFinding().GetId(), "dir": dir, "files": sortedNames(files)})
				}
				if fr.GetFinding().GetKernel() != nil {
					fmt.Printf("wrote %s/{%s}; it crashes the kernel: run it only inside a throwaway VM: sudo %s --in-vm\n", dir, strings.Join(sortedNames(files), ","), filepath.Join(dir, "repro.sh"))
					return nil
				}
				fmt.Printf("wrote %s/{%s}; run: sudo %s\n", dir, strings.Join(sortedNames(files), ","), filepath.Join(dir, "repro.sh"))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write (default: ./FINDING): made if missing, else it must be an empty directory, not a symlink; nothing in it is replaced")
	cmd.Flags().StringVar(&policy, "policy", "", "canonicalization of the state listing (default: the one the finding was judged under; auto for findings that did not record it; exact, metis, overlay, overlay-dirs)")
	return cmd
}

// exportFinding builds the reproducer's files of f (and the patches of the
// image it was found on, replayed on the stock image through c).
func exportFinding(ctx context.Context, g *globals, c *conn, f *themisv1.Finding, policy string) (repro.Files, error) {
	in := repro.Input{
		Finding: repro.Finding{ID: f.GetId(), Kind: f.GetKind(), Detail: f.GetDetail(), Path: f.GetPath(), Field: f.GetField(),
			Trace: f.GetTrace(), Revert: f.GetRevert(), Kernel: reproReport(f.GetKernel())},
		Version: themisVersion(),
	}
	specs, _, err := findingLanes(f)
	if err != nil {
		return nil, err
	}
	for i, sp := range specs {
		cmd, err := baseimage.ShellCommand(ctx, sp)
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", f.GetId(), err)
		}
		fam, err := family.Of(sp.FS)
		if err != nil {
			return nil, err
		}
		in.Lanes = append(in.Lanes, repro.Lane{Spec: f.GetLaneSpecs()[i], FS: sp.FS, SizeMiB: sp.SizeMiB, MountOptions: sp.MountOptions(), Package: fam.Package, Mkfs: cmd})
	}
	j, err := findingJudgement(f, policy)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	in.Policy = j.Policy
	in.Kernel = guestKernel(g, guest.FlavorOf(specs))
	if img := f.GetImage(); img != nil {
		in.Kernel = imageKernel(img)
	}
	patches, err := exportImage(ctx, g, c, f, &in)
	if err != nil {
		return nil, err
	}
	files, err := repro.Generate(in)
	if err != nil {
		return nil, err
	}
	for name, b := range patches {
		files[name] = b
	}
	return files, nil
}

// imageKernel is an image's kernel and flavour in words.
func imageKernel(img *themisv1.GuestImage) string {
	if fl := img.GetFlavor(); fl != "" {
		return img.GetKernelVersion() + " (" + fl + ")"
	}
	return img.GetKernelVersion()
}

// exportImage fills in.Image for a finding found on an image with code of
// its own (findingImage): its patches, copied from this host's image cache
// where it has the image (a remote daemon's is not here: the README then
// says no copy), and a replay of the trace on the lanes' stock image. It
// returns the patch files to write.
func exportImage(ctx context.Context, g *globals, c *conn, f *themisv1.Finding, in *repro.Input) (repro.Files, error) {
	if findingImage(f, "") == "" {
		return nil, nil
	}
	gi := f.GetImage()
	in.Image = &repro.Image{Kernel: imageKernel(gi), Key: gi.GetKey()}
	files := repro.Files{}
	local := localImage(g, gi.GetKey())
	for i, p := range gi.GetPatches() {
		ip := repro.ImageInput{Name: p.GetName(), BLAKE3: p.GetBlake3()}
		if local != nil {
			if b, err := local.ReadPatch(i); err == nil {
				ip.File = repro.PatchFile(i, p.GetName())
				files[ip.File] = b
			}
		}
		in.Image.Patches = append(in.Image.Patches, ip)
	}
	for _, s := range gi.GetModuleSources() {
		in.Image.Sources = append(in.Image.Sources, repro.ImageInput{Name: s.GetName(), BLAKE3: s.GetBlake3()})
	}
	progress("replaying " + f.GetId() + " on the stock image, for the README")
	stock, err := stockReplay(ctx, c, f)
	if err != nil {
		return nil, fmt.Errorf("replay on the stock image: %w", err)
	}
	in.Image.Stock = stock
	return files, nil
}

// localImage opens the image of key in this host's image cache (nil where
// it is not here).
func localImage(g *globals, key string) *guest.Image {
	dir, err := cacheDir(g)
	if err != nil {
		return nil
	}
	img, err := guest.Resolve(dir, key)
	if err != nil || img.Key != key {
		return nil
	}
	return img
}

// guestKernel names the newest guest kernel of a flavour in the image
// cache: the finding does not record the kernel it was made on, so this is
// the kernel this host's Themis boots (said as such).
func guestKernel(g *globals, flavor string) string {
	dir, err := cacheDir(g)
	if err != nil {
		return ""
	}
	if _, version, ok := guest.KernelModules(dir, flavor); ok {
		return version + " (the " + guest.FlavorName(flavor) + " kernel this host's Themis boots; the finding does not record its own)"
	}
	return ""
}

// themisVersion is the module version or VCS revision of this binary.
func themisVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
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

// exportDir is where f's export goes: out, or ./ID. The id the daemon
// returned is checked as the one asked for was: a ledger row is not
// trusted to be a path.
func exportDir(f *themisv1.Finding, out string) (string, error) {
	if err := checkFindingID("the daemon's finding", f.GetId()); err != nil {
		return "", err
	}
	if out == "" {
		return f.GetId(), nil
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

// writeExport writes files as new files under root (O_EXCL: none
// replaced, no symlink followed), repro.sh and check.sh executable.
func writeExport(root *os.Root, files repro.Files) error {
	for _, name := range sortedNames(files) {
		mode := os.FileMode(0o644)
		if name == "repro.sh" || name == "check.sh" {
			mode = 0o755
		}
		if err := writeNew(root, name, files[name], mode); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	return nil
}

// writeNew creates name under root (it must not exist) and writes b.
func writeNew(root *os.Root, name string, b []byte, mode os.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func sortedNames(files repro.Files) []string {
	var out []string
	for n := range files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
