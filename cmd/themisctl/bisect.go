package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// newBisect is `themisctl bisect`.
func newBisect(g *globals) *cobra.Command {
	var images string
	cmd := &cobra.Command{
		Use:   "bisect FINDING --images A,B,...",
		Short: "Replay a finding on an ordered list of guest images (kernels) and name the first whose outcome differs from the first's",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list := splitList(images)
			if len(list) < 2 {
				return fmt.Errorf("--images: %d given, want two or more images in order", len(list))
			}
			for i, ref := range list {
				var err error
				if list[i], err = imageRef(ref); err != nil {
					return fmt.Errorf("--images: %w", err)
				}
			}
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				r, err := bisect(ctx, c, args[0], list)
				if err != nil {
					return err
				}
				if g.json {
					return writeProtoJSON(r)
				}
				return printBisect(r)
			})
		},
	}
	cmd.Flags().StringVar(&images, "images", "", "guest images, comma-separated, in order: names or keys `themisctl guest list` shows, or image directories (with a /)")
	return cmd
}

// bisect replays finding id on every image in order on the daemon (the
// Bisect RPC: exploration.Bisect).
func bisect(ctx context.Context, c *conn, id string, images []string) (*themisv1.BisectResponse, error) {
	progress(fmt.Sprintf("replaying %s on %d images, in order", id, len(images)))
	return c.Bisect(ctx, &themisv1.BisectRequest{FindingId: id, Images: images})
}

func printBisect(r *themisv1.BisectResponse) error {
	w := newTable()
	fmt.Fprintf(w, "image\tkernel\treproduced\t\n")
	for _, row := range r.GetRows() {
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", row.GetImage(), row.GetKernelVersion(), row.GetReproduced(), row.GetDetail())
	}
	if first := r.GetFirstDifferingImage(); first != "" {
		fmt.Fprintf(w, "first image that differs\t\t%s\t\n", first)
	} else {
		fmt.Fprintf(w, "first image that differs\t\tnone: every image gives the first one's outcome\t\n")
	}
	return w.Flush()
}
