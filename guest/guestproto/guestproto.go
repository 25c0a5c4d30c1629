package guest

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// Proto is r as the API names an image (nil r: nil).
func (r *Ref) Proto() *themisv1.GuestImage {
	if r == nil {
		return nil
	}
	return &themisv1.GuestImage{Key: r.Key, KernelVersion: r.KernelVersion, Flavor: r.Flavor,
		Patches: inputsProto(r.Patches), ModuleSources: inputsProto(r.Sources), BuiltModules: r.Built}
}

// Proto is img with its files as `themisctl --json guest build` prints it
// (nil img: nil).
func (img *Image) Proto() *themisv1.CachedGuestImage {
	if img == nil {
		return nil
	}
	return &themisv1.CachedGuestImage{Image: img.Ref().Proto(), Kernel: img.Kernel, Initramfs: img.Initramfs,
		Modules: img.Modules, LazyModules: img.Lazy, Cached: img.Cached}
}

// ListProto is the cache's images as `themisctl --json guest list` prints
// them.
func ListProto(imgs []Listed) *themisv1.GuestImageList {
	out := &themisv1.GuestImageList{}
	for _, l := range imgs {
		m := l.Image.Proto()
		m.Names = l.Names
		if !l.Built.IsZero() {
			m.Built = timestamppb.New(l.Built)
		}
		out.Images = append(out.Images, m)
	}
	return out
}

func inputsProto(in []Input) []*themisv1.ImageInput {
	var out []*themisv1.ImageInput
	for _, i := range in {
		out = append(out, &themisv1.ImageInput{Name: i.Name, Blake3: i.BLAKE3})
	}
	return out
}
