package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest"
)

// imageHelp is the --image flag's usage, the same on every command.
const imageHelp = "the guest image to boot: a name or key `themisctl guest list` shows (a patched module, another kernel: `themisctl guest build --patch`), or an image directory, given with a / (default: the lanes' kernel flavour's stock image)"

// imageValue is an --image flag: a name or key goes to the daemon as it
// is; a directory (anything with a /) goes as an absolute path, since the
// daemon does not share this process's working directory.
type imageValue struct{ p *string }

func (v imageValue) Set(s string) error {
	ref, err := imageRef(s)
	if err != nil {
		return err
	}
	*v.p = ref
	return nil
}

func (v imageValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (imageValue) Type() string { return "image" }

// addImageFlag adds --image to fs, into p.
func addImageFlag(fs *pflag.FlagSet, p *string) {
	fs.Var(imageValue{p}, "image", imageHelp)
}

// imageRef is an image reference as the daemon takes it: a directory
// (with a /) made absolute, a name or key as it is.
func imageRef(s string) (string, error) {
	if !strings.Contains(s, "/") {
		return s, nil
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", s, err)
	}
	return abs, nil
}

// findingImage is the image to replay f on: the one asked for, else the
// image f was found on when it carries code of its own (a patched
// module: the stock image would not show it), else the lanes' own ("").
func findingImage(f *themisv1.Finding, asked string) string {
	if asked != "" {
		return asked
	}
	img := f.GetImage()
	if len(img.GetPatches()) > 0 || len(img.GetModuleSources()) > 0 || img.GetFlavor() == "custom" {
		return img.GetKey()
	}
	return ""
}

// imageLine is one line naming a session's or finding's image: kernel,
// flavour, patches ("" when none was kept).
func imageLine(img *themisv1.GuestImage) string {
	if img == nil {
		return ""
	}
	return (&guest.Ref{Key: img.GetKey(), KernelVersion: img.GetKernelVersion(), Flavor: img.GetFlavor(),
		Patches: imageInputs(img.GetPatches()), Sources: imageInputs(img.GetModuleSources()), Built: img.GetBuiltModules()}).String()
}

func imageInputs(in []*themisv1.ImageInput) []guest.Input {
	var out []guest.Input
	for _, i := range in {
		out = append(out, guest.Input{Name: i.GetName(), BLAKE3: i.GetBlake3()})
	}
	return out
}
