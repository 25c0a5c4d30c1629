package launch_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"
	"github.com/themisfs/themis/guest/baseimage"
	"github.com/themisfs/themis/launch"
	"github.com/themisfs/themis/vmm"
)

// The way a caller with a request (a session's Create) uses launch: choose
// the backend at the edge, mapping a bad value to its own field error, then
// boot, and record the backend that booted.
func Example() {
	ctx := context.Background()
	choice, err := launch.Choose(launch.Probe(), "auto")
	var fe *errkind.FieldError
	if errors.As(err, &fe) {
		fmt.Printf("invalid %s: %s\n", fe.Field, fe.Msg)
		return
	}
	img, err := guest.Build(ctx, guest.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	lanes, err := guest.ParseLaneSpecs("ext2,overlay:name=ov")
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := launch.Boot(ctx, launch.Spec{Image: img, MakeBase: baseimage.Make, Lanes: lanes, MemoryMiB: 128,
		Restore: vmm.RestoreDevices, Verify: true, Backend: choice})
	if err != nil {
		fmt.Println("boot:", err)
		return
	}
	fmt.Println("booted on", g.Backend, "with", len(g.Lanes), "lanes mounted")
	if err := g.Close(); err != nil {
		fmt.Println(err)
	}
}
