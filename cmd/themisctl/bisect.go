package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// bisectRow is one image's replay of a finding.
type bisectRow struct {
	Image      string `json:"image"`
	Kernel     string `json:"kernel_version,omitempty"` // the kernel the replay's session booted
	Reproduced bool   `json:"reproduced"`
	Detail     string `json:"detail"`
}

// bisectResult is `themisctl bisect`: the finding replayed on each image
// in order, and the first whose outcome differs from the first image's.
type bisectResult struct {
	Finding     string      `json:"finding"`
	Rows        []bisectRow `json:"rows"`
	FirstDiffer string      `json:"first_differing_image,omitempty"`
}

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
					return writeJSON(os.Stdout, r)
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
func bisect(ctx context.Context, c *conn, id string, images []string) (*bisectResult, error) {
	progress(fmt.Sprintf("replaying %s on %d images, in order", id, len(images)))
	resp, err := c.Bisect(ctx, &themisv1.BisectRequest{FindingId: id, Images: images})
	if err != nil {
		return nil, err
	}
	r := &bisectResult{Finding: resp.GetFindingId(), FirstDiffer: resp.GetFirstDifferingImage()}
	for _, row := range resp.GetRows() {
		r.Rows = append(r.Rows, bisectRow{Image: row.GetImage(), Kernel: row.GetKernelVersion(), Reproduced: row.GetReproduced(), Detail: row.GetDetail()})
	}
	return r, nil
}

func printBisect(r *bisectResult) error {
	w := newTable()
	fmt.Fprintf(w, "image\tkernel\treproduced\t\n")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", row.Image, row.Kernel, row.Reproduced, row.Detail)
	}
	if r.FirstDiffer != "" {
		fmt.Fprintf(w, "first image that differs\t\t%s\t\n", r.FirstDiffer)
	} else {
		fmt.Fprintf(w, "first image that differs\t\tnone: every image gives the first one's outcome\t\n")
	}
	return w.Flush()
}
