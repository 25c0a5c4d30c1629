package session

import (
	"context"
	"fmt"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/overlay"
)

// Current names the running state in Diff.
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

// diffFields are the request fields a side's errors name.
type diffFields struct{ session, lane, at string }

var (
	diffFieldsA = diffFields{"session_id", "lane", "from"}
	diffFieldsB = diffFields{"session_b", "lane_b", "to"}
)

// Diff compares two disks: a lane at two points of one session, two lanes
// of one session, or lanes of two sessions. In b, an empty Session means
// a's session and an empty Lane a's lane. A checkpoint's image is the disk
// as the block device had it at the checkpoint (the overlay through the
// layers below the one the checkpoint pushed); Current is the disk now,
// without what the guest still holds in its page cache (Apply a sync first
// to include that). With normalize, nuisance fields of ext2/3/4 are masked.
//
// Errors name the request's fields: session_id, lane, from for a;
// session_b, lane_b, to for b. Images of different sizes are refused
// (lane_b), naming both sizes. Both sessions are locked for the length of
// the comparison, in id order.
func (m *Manager) Diff(ctx context.Context, a, b DiffSide, normalize bool) (*fsimage.DiffResult, error) {
	if b.Session == "" {
		b.Session = a.Session
	}
	if b.Lane == "" {
		b.Lane = a.Lane
	}
	for _, c := range []struct {
		field, v, want string
	}{
		{diffFieldsA.session, a.Session, "a session id"},
		{diffFieldsA.lane, a.Lane, "a lane name"},
		{diffFieldsA.at, a.At, fmt.Sprintf("a checkpoint id or name, or %q", Current)},
		{diffFieldsB.at, b.At, fmt.Sprintf("a checkpoint id or name, or %q", Current)},
	} {
		if c.v == "" {
			return nil, Invalid(c.field, "required: %s", c.want)
		}
	}
	sa, sb, err := m.lookupPair(ctx, a.Session, b.Session)
	if err != nil {
		return nil, err
	}
	defer sa.mu.Unlock()
	if sb != sa {
		defer sb.mu.Unlock()
	}
	devA, va, err := sa.diffView(a, diffFieldsA)
	if err != nil {
		return nil, err
	}
	devB, vb, err := sb.diffView(b, diffFieldsB)
	if err != nil {
		return nil, err
	}
	if devA.Size() != devB.Size() {
		return nil, Invalid(diffFieldsB.lane, "images differ in size: %s/%s is %d bytes, %s/%s is %d bytes",
			a.Session, a.Lane, devA.Size(), b.Session, b.Lane, devB.Size())
	}
	d, err := fsimage.Diff(va, vb, devA.Size(), normalize)
	if err != nil {
		return nil, fmt.Errorf("diff %s..%s: %w", a, b, err)
	}
	return d, nil
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
	sides := []*side{{id: a, field: diffFieldsA.session}, {id: b, field: diffFieldsB.session}}
	if b < a {
		sides[0], sides[1] = sides[1], sides[0]
	}
	for i, sd := range sides {
		s, err := m.lookup(ctx, sd.id)
		if err != nil {
			if i == 1 {
				sides[0].s.mu.Unlock()
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

// diffView returns side's overlay and its view at side.At. s.mu is held.
func (s *session) diffView(side DiffSide, f diffFields) (*overlay.Device, *overlay.View, error) {
	if err := s.checkLane(f.lane, side.Lane); err != nil {
		return nil, nil, err
	}
	idx := -1
	for i, sp := range s.specs {
		if sp.Name == side.Lane {
			idx = i
		}
	}
	if idx < 0 || idx >= len(s.devs) || s.devs[idx] == nil {
		return nil, nil, fmt.Errorf("session %s has no disk for lane %q: %w", s.info.ID, side.Lane, ErrState)
	}
	dev := s.devs[idx]
	n := dev.Depth()
	if side.At != Current {
		c, err := s.resolve(side.At)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.at, err)
		}
		if !c.Live {
			return nil, nil, fmt.Errorf("%s: checkpoint %s not on the current path: %w", f.at, c.ID, ErrState)
		}
		n = c.OverlayDepth - 1
	}
	v, err := dev.ViewAt(n)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.at, err)
	}
	return dev, v, nil
}
