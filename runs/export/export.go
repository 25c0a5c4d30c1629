package export

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/internal/kreport"
	"github.com/themisfs/themis/repro"
	"github.com/themisfs/themis/runs/exploration"
	"github.com/themisfs/themis/session"
)

// CrashImage is the name of a crash finding's crash state image.
const CrashImage = "crash.img"

// Options is an export's: the canonicalization of the state listing
// (Policy; "" the one the finding was judged under, else auto); the form
// (Format: "" the reproducer, FormatFSTests an fstests test named
// FSTestsTest, DIR/NNN, run as the lane FSTestsLane, "" the first).
type Options struct {
	Policy                           string
	Format, FSTestsTest, FSTestsLane string
}

// Sinks take what an export makes.
type Sinks struct {
	// File gets each file of the reproducer whole: its name (a plain
	// name, no directory), whether it is executable, its bytes.
	File func(name string, exec bool, data []byte) error
	// Image gets a crash finding's crash state's disk image (CrashImage)
	// in chunks, zeros left out: offset, data, the image's size.
	Image func(off int64, data []byte, size int64) error
}

// Summary is what an export made.
type Summary struct {
	Finding, Kind string
	// Files are the names written, CrashImage last for a crash finding.
	Files []string
	// CrashReproduced says the crash finding's replay that made the image
	// was bad the same way (false: the README says it was not).
	CrashReproduced bool
	// Stock is the replay on the lanes' stock image of a finding found on
	// a patched image (nil: none was needed).
	Stock *repro.Stock
}

// Run exports f.
func Run(ctx context.Context, m *session.Manager, f *session.Finding, o Options, out Sinks) (*Summary, error) {
	sum := &Summary{Finding: f.ID, Kind: f.Kind}
	var files repro.Files
	var err error
	switch {
	case o.Format == FormatFSTests:
		files, err = fstestsFiles(f, o)
	case o.Format != "":
		err = errkind.Invalid("format", "%q: want empty (the reproducer) or %s", o.Format, FormatFSTests)
	case f.Kind == session.KindCrash:
		files, err = crashFiles(ctx, m, f, out, sum)
	default:
		files, err = reproFiles(ctx, m, f, o, sum)
	}
	if err != nil {
		return nil, err
	}
	for _, name := range sortedNames(files) {
		exec := name == "repro.sh" || name == "check.sh" || o.Format == FormatFSTests && !strings.HasSuffix(name, ".out")
		if err := out.File(name, exec, files[name]); err != nil {
			return nil, err
		}
		sum.Files = append(sum.Files, name)
	}
	if f.Kind == session.KindCrash && o.Format == "" {
		sum.Files = append(sum.Files, CrashImage)
	}
	return sum, nil
}

// reproFiles builds repro.c, repro.sh and README of f, and the patches of
// the image it was found on.
func reproFiles(ctx context.Context, m *session.Manager, f *session.Finding, o Options, sum *Summary) (repro.Files, error) {
	in := repro.Input{
		Finding: repro.Finding{ID: f.ID, Kind: f.Kind, Detail: f.Detail, Path: f.Path, Field: f.Field, Trace: f.Trace, Revert: f.Revert, Kernel: reproReport(f.Kernel)},
		Version: version(),
	}
	specs := make([]guest.LaneSpec, len(f.LaneSpecs))
	lanes := make([]family.Lane, len(f.LaneSpecs))
	for i, s := range f.LaneSpecs {
		sp, err := guest.ParseLaneSpec(s)
		if err != nil {
			return nil, fmt.Errorf("finding %s: lane %q: %w", f.ID, s, err)
		}
		cmd, err := baseimage.ShellCommand(ctx, sp)
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", f.ID, err)
		}
		fam, err := family.Of(sp.FS)
		if err != nil {
			return nil, err
		}
		specs[i], lanes[i] = sp, family.Lane{Name: sp.Name, FS: sp.FS, Seeded: sp.Seed() != 0}
		in.Lanes = append(in.Lanes, repro.Lane{Spec: s, FS: sp.FS, SizeMiB: sp.SizeMiB, MountOptions: sp.MountOptions(), Package: fam.Package, Mkfs: cmd})
	}
	j, err := family.Judge(lanes, policyOf(f, o))
	if err != nil {
		return nil, errkind.Invalid("policy", "%v", err)
	}
	in.Policy = j.Policy
	in.Kernel = cacheKernel(m.CacheDir(), guest.FlavorOf(specs))
	if f.Image != nil {
		in.Kernel = imageKernel(f.Image)
	}
	patches, err := imageInput(ctx, m, f, &in, sum)
	if err != nil {
		return nil, err
	}
	files, err := repro.Generate(in)
	if err != nil {
		return nil, errkind.Invalid("finding_id", "%v", err)
	}
	for name, b := range patches {
		files[name] = b
	}
	return files, nil
}

// policyOf is the policy f's listing is canonicalized under: o's, else
// the one f was judged under, else auto.
func policyOf(f *session.Finding, o Options) string {
	switch {
	case o.Policy != "":
		return o.Policy
	case f.Policy != "":
		return f.Policy
	}
	return family.AutoPolicy
}

// imageInput fills in.Image for a finding found on an image with code of
// its own (exploration.FindingImage): its patches, copied from the image
// cache, and a replay of the trace on the lanes' stock image. It returns
// the patch files.
func imageInput(ctx context.Context, m *session.Manager, f *session.Finding, in *repro.Input, sum *Summary) (repro.Files, error) {
	if exploration.FindingImage(f) == "" {
		return nil, nil
	}
	ref := f.Image
	in.Image = &repro.Image{Kernel: imageKernel(ref), Key: ref.Key}
	files := repro.Files{}
	img, err := guest.Resolve(m.CacheDir(), ref.Key)
	if err != nil || img.Key != ref.Key {
		img = nil // gone from the cache: the README says there is no copy
	}
	for i, p := range ref.Patches {
		ip := repro.ImageInput{Name: p.Name, BLAKE3: p.BLAKE3}
		if img != nil {
			if b, err := img.ReadPatch(i); err == nil {
				ip.File = repro.PatchFile(i, p.Name)
				files[ip.File] = b
			}
		}
		in.Image.Patches = append(in.Image.Patches, ip)
	}
	for _, s := range ref.Sources {
		in.Image.Sources = append(in.Image.Sources, repro.ImageInput{Name: s.Name, BLAKE3: s.BLAKE3})
	}
	rep, err := exploration.Replay(ctx, m, f, exploration.ReplayOn{Stock: true})
	if err != nil {
		return nil, fmt.Errorf("replay on the stock image: %w", err)
	}
	in.Image.Stock = &repro.Stock{Reproduced: rep.Reproduced}
	if rep.Booted != nil {
		in.Image.Stock.Kernel = rep.Booted.KernelVersion
	}
	sum.Stock = in.Image.Stock
	return files, nil
}

// imageKernel is an image's kernel and flavour in words.
func imageKernel(r *guest.Ref) string {
	if r.Flavor != "" {
		return r.KernelVersion + " (" + r.Flavor + ")"
	}
	return r.KernelVersion
}

// cacheKernel names the newest guest kernel of a flavour in the image
// cache: a finding recorded before its image was kept does not say its
// kernel, so this is the kernel the daemon boots (said as such).
func cacheKernel(cacheDir, flavor string) string {
	if _, v, ok := guest.KernelModules(cacheDir, flavor); ok {
		return v + " (the " + guest.FlavorName(flavor) + " kernel this daemon boots; the finding does not record its own)"
	}
	return ""
}

// reproReport is a kernel finding's report for its reproducer (nil: not
// a kernel finding).
func reproReport(k *kreport.Report) *repro.KernelReport {
	if k == nil {
		return nil
	}
	return &repro.KernelReport{Kind: string(k.Kind), Title: k.Title, RIP: k.RIP, Panic: k.Panic, Trace: k.Trace, Text: k.Text}
}

// version is the module version or VCS revision of this binary (the
// daemon's, which made the reproducer).
func version() string {
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
