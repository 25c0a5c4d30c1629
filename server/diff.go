package server

import (
	"context"
	"fmt"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/session"
)

// diffDisks is the Diff RPC's domain: it compares the disks sides a and b
// name — a lane at two points of one session, two lanes of one session, or
// lanes of two sessions — byte by byte, labelled by filesystem structure
// (fsimage.Diff), over the views session.Manager.Views resolves. With normalize, nuisance fields of ext2/3/4 are masked.
//
// Errors name the request's fields: session_id, lane, from for a;
// session_b, lane_b, to for b. Images of different sizes are refused
// (lane_b), naming both sizes. Both sessions are locked for the length of
// the comparison.
func diffDisks(ctx context.Context, m *session.Manager, a, b session.DiffSide, normalize bool) (*fsimage.DiffResult, error) {
	var d *fsimage.DiffResult
	err := m.Views(ctx, a, b, func(va, vb session.DiskView) error {
		if va.Size != vb.Size {
			return errkind.Invalid(session.FieldsB.Lane, "images differ in size: %s/%s is %d bytes, %s/%s is %d bytes",
				va.Side.Session, va.Side.Lane, va.Size, vb.Side.Session, vb.Side.Lane, vb.Size)
		}
		var err error
		if d, err = fsimage.Diff(va.View, vb.View, va.Size, normalize); err != nil {
			return fmt.Errorf("diff %s..%s: %w", va.Side, vb.Side, err)
		}
		return nil
	})
	return d, err
}
