package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/hosttool"
)

// Lane is one lane filesystem: whether this host and its newest cached
// guest image can run it, and why not.
type Lane struct {
	FS     string
	Family string
	Ready  bool
	// Why says what is missing (empty when Ready).
	Why string
	// Checker is the host checker of --fsck and corrupt: its command,
	// "none" where Debian has none, or what is missing.
	Checker string
	// Flavor is the guest kernel flavour its lanes boot (guest.Flavors).
	Flavor string
}

// checkLanes lists every lane filesystem (guest.SupportedFS): its base
// image's tools on the host (baseimage.CanMake), its kernel module
// (family.Family.Module) among its kernel flavour's default modules
// (guest.DefaultModulesFor) and in that flavour's cached kernel (not
// checked before one is fetched), and its host checker.
func checkLanes(ctx context.Context, cacheDir string) []Lane {
	var out []Lane
	for _, fs := range guest.SupportedFS() {
		l := Lane{FS: fs, Ready: true}
		var why []string
		fam, err := family.Of(fs)
		if err != nil {
			why = append(why, err.Error())
		} else {
			l.Family = fam.Name
		}
		spec, err := guest.ParseLaneSpec(fs)
		if err == nil {
			err = baseimage.CanMake(ctx, spec.Layer())
		}
		if err != nil {
			why = append(why, hosttool.Unwrap(err).Error())
		}
		if fam != nil && fam.Module != "" {
			l.Flavor = spec.Flavor()
			mods, kernel, fetched := guest.KernelModules(cacheDir, l.Flavor)
			if !slices.Contains(guest.DefaultModulesFor(l.Flavor), fam.Module) {
				why = append(why, fmt.Sprintf("kernel module %s is not among the %s image's default modules", fam.Module, l.Flavor))
			}
			if fetched && !mods[fam.Module] {
				why = append(why, fmt.Sprintf("kernel %s has no module %s", kernel, fam.Module))
			}
		}
		l.Checker = checkerOf(spec.Layer().FS)
		if len(why) > 0 {
			l.Ready, l.Why = false, strings.Join(why, "; ")
		}
		out = append(out, l)
	}
	return out
}

// checkerOf names the host checker of filesystem fs, or why there is none.
func checkerOf(fs string) string {
	tool, err := hostfsck.For(fs)
	if err != nil {
		return "none"
	}
	if err := tool.Installed(); err != nil {
		return err.Error()
	}
	return tool.Name
}
