package guestproto

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/guest"
)

// Ref is r as the API names an image (nil r: nil).
func Ref(r *guest.Ref) *themisv1.GuestImage {
	if r == nil {
		return nil
	}
	return &themisv1.GuestImage{Key: r.Key, KernelVersion: r.KernelVersion, Flavor: r.Flavor,
		Patches: inputs(r.Patches), ModuleSources: inputs(r.Sources), BuiltModules: r.Built}
}

// Image is img with its files as `themisctl --json guest build` prints it
// (nil img: nil).
func Image(img *guest.Image) *themisv1.CachedGuestImage {
	if img == nil {
		return nil
	}
	return &themisv1.CachedGuestImage{Image: Ref(img.Ref()), Kernel: img.Kernel, Initramfs: img.Initramfs,
		Modules: img.Modules, LazyModules: img.Lazy, Cached: img.Cached}
}

// List is the cache's images as `themisctl --json guest list` prints them.
func List(imgs []guest.Listed) *themisv1.GuestImageList {
	out := &themisv1.GuestImageList{}
	for _, l := range imgs {
		m := Image(&l.Image)
		m.Names = l.Names
		if !l.Built.IsZero() {
			m.Built = timestamppb.New(l.Built)
		}
		out.Images = append(out.Images, m)
	}
	return out
}

func inputs(in []guest.Input) []*themisv1.ImageInput {
	var out []*themisv1.ImageInput
	for _, i := range in {
		out = append(out, &themisv1.ImageInput{Name: i.Name, Blake3: i.BLAKE3})
	}
	return out
}
