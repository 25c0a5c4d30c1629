package session

import (
	"context"
	"fmt"
	"slices"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest"

	"github.com/themisfs/themis/overlay"
)

// Current names the running state of a DiffSide.
const Current = "current"

// DiffSide names one lane's disk at one point of a session.
type DiffSide struct {
	// Session is the session id.
	Session string
	// Lane is the lane's name.
	Lane string
	// At is a live checkpoint's id or name, or Current.
	At string
}

func (d DiffSide) String() string { return d.Session + "/" + d.Lane + "@" + d.At }

// SideFields are the request fields a side's errors name.
type SideFields struct{ Session, Lane, At string }

// The fields of a diff's two sides.
var (
	FieldsA = SideFields{"session_id", "lane", "from"}
	FieldsB = SideFields{"session_b", "lane_b", "to"}
)

// DiskView is one lane's disk as a DiffSide names it.
type DiskView struct {
	Side DiffSide
	// Size is the disk's size in bytes.
	Size int64
	// View reads the disk as it was at Side.At.
	View *overlay.View
}

// Views resolves two sides — a lane at two points of one session, two
// lanes of one session, or lanes of two sessions — and runs f on their
// views with both sessions locked (in id order, so two calls in opposite
// directions cannot deadlock). In b, an empty Session means a's session
// and an empty Lane a's lane. A checkpoint's view is the disk as the block
// device had it at the checkpoint (the overlay through the layers below the
// one the checkpoint pushed); Current is the disk now, without what the
// guest still holds in its page cache (Apply a sync first to include that).
//
// Errors name the request's fields (FieldsA for a, FieldsB for b).
func (m *Manager) Views(ctx context.Context, a, b DiffSide, f func(a, b DiskView) error) error {
	if b.Session == "" {
		b.Session = a.Session
	}
	if b.Lane == "" {
		b.Lane = a.Lane
	}
	for _, c := range []struct {
		field, v, want string
	}{
		{FieldsA.Session, a.Session, "a session id"},
		{FieldsA.Lane, a.Lane, "a lane name"},
		{FieldsA.At, a.At, fmt.Sprintf("a checkpoint id or name, or %q", Current)},
		{FieldsB.At, b.At, fmt.Sprintf("a checkpoint id or name, or %q", Current)},
	} {
		if c.v == "" {
			return errkind.Invalid(c.field, "required: %s", c.want)
		}
	}
	sa, sb, err := m.lookupPair(ctx, a.Session, b.Session)
	if err != nil {
		return err
	}
	defer sa.unlock()
	if sb != sa {
		defer sb.unlock()
	}
	va, err := sa.diskView(a, FieldsA)
	if err != nil {
		return err
	}
	vb, err := sb.diskView(b, FieldsB)
	if err != nil {
		return err
	}
	return f(va, vb)
}

// lookupPair looks up and locks sessions a and b (once when they are the
// same), in id order so that two diffs in opposite directions cannot
// deadlock. A lookup error names the side's field.
func (m *Manager) lookupPair(ctx context.Context, a, b string) (*session, *session, error) {
	if a == b {
		s, err := m.lookup(ctx, a)
		return s, s, err
	}
	type side struct {
		id, field string
		s         *session
	}
	sides := []*side{{id: a, field: FieldsA.Session}, {id: b, field: FieldsB.Session}}
	if b < a {
		sides[0], sides[1] = sides[1], sides[0]
	}
	for i, sd := range sides {
		s, err := m.lookup(ctx, sd.id)
		if err != nil {
			if i == 1 {
				sides[0].s.unlock()
			}
			return nil, nil, fmt.Errorf("%s: %w", sd.field, err)
		}
		sd.s = s
	}
	if b < a {
		return sides[1].s, sides[0].s, nil
	}
	return sides[0].s, sides[1].s, nil
}

// diskView returns side's view at side.At. s.mu is held.
func (s *session) diskView(side DiffSide, f SideFields) (DiskView, error) {
	if err := s.checkLane(f.Lane, side.Lane); err != nil {
		return DiskView{}, err
	}
	idx := slices.IndexFunc(s.specs, func(sp guest.LaneSpec) bool { return sp.Name == side.Lane })
	if idx < 0 || idx >= len(s.devs) || s.devs[idx] == nil {
		return DiskView{}, fmt.Errorf("session %s has no disk for lane %q: %w", s.info.ID, side.Lane, errkind.ErrState)
	}
	dev := s.devs[idx]
	n := dev.Depth()
	if side.At != Current {
		c, err := s.resolve(side.At)
		if err != nil {
			return DiskView{}, fmt.Errorf("%s: %w", f.At, err)
		}
		if !c.Live {
			return DiskView{}, fmt.Errorf("%s: checkpoint %s not on the current path: %w", f.At, c.ID, errkind.ErrState)
		}
		n = c.OverlayDepth - 1
	}
	v, err := dev.ViewAt(n)
	if err != nil {
		return DiskView{}, fmt.Errorf("%s: %w", f.At, err)
	}
	return DiskView{Side: side, Size: dev.Size(), View: v}, nil
}
