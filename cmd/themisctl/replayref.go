package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/themisfs/themis/api"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/explore"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/oracle"
)

// replayReference runs, after a replayed trace, the self-reference of f's
// kind that compares a lane with itself, and says what it shows ("": it
// shows nothing; not replayable: a kind it does not replay, said in
// words). Remount: the lanes change across umount+mount. Unreadable: a
// lane has an entry its filesystem refuses to read. Size limit: a lane
// holds a file larger than its family allows.
func replayReference(ctx context.Context, c *conn, j family.Judgement, f *themisv1.Finding, id string) (shows string, replayable bool, err error) {
	switch f.GetKind() {
	case api.KindRemount:
		shows, err = replayRemount(ctx, c, j, f, id)
	case api.KindUnreadable:
		shows, err = replayUnreadable(ctx, c, id)
	case api.KindSizeLimit:
		shows, err = replaySizeLimit(ctx, c, f, id)
	default:
		return "", false, nil
	}
	return shows, true, err
}

// replayRemount fingerprints session id's lanes, remounts them and says
// the first difference (under the time mode f's field needs).
func replayRemount(ctx context.Context, c *conn, j family.Judgement, f *themisv1.Finding, id string) (string, error) {
	mode := agentv1.TimeMode_TIME_MODE_NONE
	if slices.Contains([]string{"atime", "mtime", "ctime"}, f.GetField()) {
		mode = agentv1.TimeMode_TIME_MODE_ALL
	}
	before, err := laneLeaves(ctx, c, id, mode)
	if err != nil {
		return "", err
	}
	if err := remountLanes(ctx, c, id); err != nil {
		return fmt.Sprintf("remount failed: %v", err), nil
	}
	after, err := laneLeaves(ctx, c, id, mode)
	if err != nil {
		return "", err
	}
	for lane, b := range before {
		a := oracle.Canonicalize(after[lane], j.Policy)
		b = oracle.Canonicalize(b, j.Policy)
		if p, ok := oracle.FirstDiff(b, a, mode); ok {
			field, vb, va := explore.FieldDiff(oracle.Find(b, p), oracle.Find(a, p), mode)
			return fmt.Sprintf("lane %s changed across umount+mount at %s: %s %s before, %s after", lane, shownLanePath(p), field, vb, va), nil
		}
	}
	return "", nil
}

// replayUnreadable says the first entry of session id's lanes that the
// filesystem refuses to read.
func replayUnreadable(ctx context.Context, c *conn, id string) (string, error) {
	lanes, err := laneLeaves(ctx, c, id, agentv1.TimeMode_TIME_MODE_NONE)
	if err != nil {
		return "", err
	}
	for _, lane := range slices.Sorted(maps.Keys(lanes)) {
		for _, e := range lanes[lane] {
			if n := e.GetReadErrno(); n != 0 {
				return fmt.Sprintf("lane %s: the filesystem refuses to read %s: %s", lane, shownLanePath(e.GetPath()), oracle.ErrnoText(n)), nil
			}
		}
	}
	return "", nil
}

// replaySizeLimit says the first regular file of session id's lanes that
// is larger than its lane's family allows (family.Family.MaxFile).
func replaySizeLimit(ctx context.Context, c *conn, f *themisv1.Finding, id string) (string, error) {
	_, lanes, err := findingLanes(f)
	if err != nil {
		return "", err
	}
	leaves, err := laneLeaves(ctx, c, id, agentv1.TimeMode_TIME_MODE_NONE)
	if err != nil {
		return "", err
	}
	for _, l := range lanes {
		fam, err := family.Of(l.FS)
		if err != nil || fam.MaxFile == 0 {
			continue
		}
		for _, e := range leaves[l.Name] {
			if e.GetKind() == agentv1.Kind_KIND_REGULAR && e.GetSize() > fam.MaxFile {
				return fmt.Sprintf("lane %s: %s has %d bytes, past its filesystem's largest file, %d bytes", l.Name, shownLanePath(e.GetPath()), e.GetSize(), fam.MaxFile), nil
			}
		}
	}
	return "", nil
}

// laneLeaves are session id's lanes' leaves, by lane.
func laneLeaves(ctx context.Context, c *conn, id string, mode agentv1.TimeMode) (map[string][]*agentv1.Entry, error) {
	fp, err := c.Fingerprint(ctx, &themisv1.FingerprintRequest{SessionId: id, Leaves: true, TimeMode: mode})
	if err != nil {
		return nil, err
	}
	out := map[string][]*agentv1.Entry{}
	for _, l := range fp.GetLanes() {
		out[l.GetLane()] = l.GetLeaves()
	}
	return out, nil
}

// shownLanePath is a lane path as findings show it ("/" for the root).
func shownLanePath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
