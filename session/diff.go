package session

import (
	"context"
	"fmt"

	"github.com/themisfs/themis/fsimage"
	"github.com/themisfs/themis/overlay"
)

// Current names the running state in Diff.
const Current = "current"

// Diff compares one lane's disk at two points of a session: live
// checkpoints (id or name) or Current. The checkpoint's image is the disk
// as the block device had it at the checkpoint (the overlay through the
// layers below the one the checkpoint pushed); Current is the disk now,
// without what the guest still holds in its page cache (Apply a sync first
// to include that). With normalize, nuisance fields of ext2/3/4 are masked.
func (m *Manager) Diff(ctx context.Context, sessionID, lane, from, to string, normalize bool) (*fsimage.DiffResult, error) {
	for field, ref := range map[string]string{"from": from, "to": to} {
		if ref == "" {
			return nil, Invalid(field, "required: a checkpoint id or name, or %q", Current)
		}
	}
	s, err := m.lookup(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := s.checkLane("lane", lane); err != nil {
		return nil, err
	}
	idx := 0
	for i, sp := range s.specs {
		if sp.Name == lane {
			idx = i
		}
	}
	if idx >= len(s.devs) || s.devs[idx] == nil {
		return nil, fmt.Errorf("session %s has no disk for lane %q: %w", s.info.ID, lane, ErrState)
	}
	dev := s.devs[idx]
	view := func(field, ref string) (*overlay.View, error) {
		n := dev.Depth()
		if ref != Current {
			c, err := s.resolve(ref)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			if !c.Live {
				return nil, fmt.Errorf("%s: checkpoint %s not on the current path: %w", field, c.ID, ErrState)
			}
			n = c.OverlayDepth - 1
		}
		v, err := dev.ViewAt(n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return v, nil
	}
	a, err := view("from", from)
	if err != nil {
		return nil, err
	}
	b, err := view("to", to)
	if err != nil {
		return nil, err
	}
	d, err := fsimage.Diff(a, b, dev.Size(), normalize)
	if err != nil {
		return nil, fmt.Errorf("diff %s..%s on %s: %w", from, to, lane, err)
	}
	return d, nil
}
