package repro

import "fmt"

// Image is the guest image a finding was found on, where it carries code
// of its own (a patched module): what a reproducer needs beyond a stock
// kernel.
type Image struct {
	// Kernel is the image's kernel ("6.1.0-57-cloud-amd64 (cloud)").
	Kernel string
	// Key is the image's content key in Themis's image cache.
	Key string
	// Patches are the patches built into it, in order; Sources the module
	// source directories.
	Patches []ImageInput
	Sources []ImageInput
	// Stock is what a replay on the lanes' stock image showed (nil: not
	// replayed).
	Stock *Stock
}

// ImageInput is one patch or module source: its name, content hash and,
// for a patch the export carries, the file it is written to ("" none).
type ImageInput struct {
	Name, BLAKE3, File string
}

// Stock is a finding replayed on the stock image of its lanes' kernel.
type Stock struct {
	Kernel     string
	Reproduced bool
}

// imageView is an Image in the templates.
type imageView struct {
	Kernel, Key      text
	Patches, Sources []inputView
	Stock            *stockView
}

type inputView struct{ Name, BLAKE3, File text }

type stockView struct {
	Kernel     text
	Reproduced bool
}

func viewOfImage(img *Image) *imageView {
	if img == nil {
		return nil
	}
	v := &imageView{Kernel: text(orUnknown(img.Kernel)), Key: text(img.Key)}
	for _, p := range img.Patches {
		v.Patches = append(v.Patches, inputView{Name: text(p.Name), BLAKE3: text(p.BLAKE3), File: text(p.File)})
	}
	for _, s := range img.Sources {
		v.Sources = append(v.Sources, inputView{Name: text(s.Name), BLAKE3: text(s.BLAKE3)})
	}
	if img.Stock != nil {
		v.Stock = &stockView{Kernel: text(orUnknown(img.Stock.Kernel)), Reproduced: img.Stock.Reproduced}
	}
	return v
}

// PatchFile is the name an export gives the i-th patch (0-based) of an
// image: patch-<n>-<name> with the name's unsafe characters replaced.
func PatchFile(i int, name string) string {
	return fmt.Sprintf("patch-%d-%s", i+1, unsafeName.ReplaceAllString(name, "_"))
}
