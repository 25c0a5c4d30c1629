package server

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/guest/guestproto"
	"github.com/themisfs/themis/session"
)

// Domain -> proto.

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func sessionState(s session.State) themisv1.Session_State {
	switch s {
	case session.StateRunning:
		return themisv1.Session_STATE_RUNNING
	case session.StateEnded:
		return themisv1.Session_STATE_ENDED
	case session.StateFailed:
		return themisv1.Session_STATE_FAILED
	case session.StateUnresponsive:
		return themisv1.Session_STATE_UNRESPONSIVE
	default:
		return themisv1.Session_STATE_UNSPECIFIED
	}
}

func sessionProto(in *session.Info) *themisv1.Session {
	if in == nil {
		return nil
	}
	out := &themisv1.Session{
		Id:          in.ID,
		State:       sessionState(in.State),
		Backend:     in.Backend,
		MemoryMib:   int32(in.MemoryMiB),
		RestoreMode: string(in.Restore),
		Verify:      in.Verify,
		CreateTime:  timestamp(in.Created),
		EndTime:     timestamp(in.Ended),
		Reason:      in.Reason,
		Depth:       int32(in.Depth),
		Image:       guestproto.Ref(in.Image),
	}
	for _, l := range in.Lanes {
		out.Lanes = append(out.Lanes, &themisv1.Lane{Name: l.Name, Spec: l.Spec, Fs: l.FS})
	}
	return out
}

func originProto(o session.Origin) themisv1.Checkpoint_Origin {
	switch o {
	case session.OriginManual:
		return themisv1.Checkpoint_ORIGIN_MANUAL
	case session.OriginAuto:
		return themisv1.Checkpoint_ORIGIN_AUTO
	default:
		return themisv1.Checkpoint_ORIGIN_UNSPECIFIED
	}
}

func checkpointProto(c *session.Checkpoint) *themisv1.Checkpoint {
	if c == nil {
		return nil
	}
	out := &themisv1.Checkpoint{
		Id:           c.ID,
		SessionId:    c.Session,
		ParentId:     c.Parent,
		Name:         c.Name,
		Origin:       originProto(c.Origin),
		Slot:         int32(c.Slot),
		CreateTime:   timestamp(c.Created),
		OverlayDepth: int32(c.OverlayDepth),
		Live:         c.Live,
	}
	for _, lane := range sortedKeys(c.Roots) {
		out.Roots = append(out.Roots, &themisv1.LaneRoot{Lane: lane, Root: c.Roots[lane]})
	}
	return out
}

func laneResultProto(r session.LaneResult) *themisv1.LaneResult {
	return &themisv1.LaneResult{Lane: r.Lane, Errno: r.Errno, Error: r.Error, Ret: r.Ret}
}

func laneResultsProto(rs []session.LaneResult) []*themisv1.LaneResult {
	out := make([]*themisv1.LaneResult, 0, len(rs))
	for _, r := range rs {
		out = append(out, laneResultProto(r))
	}
	return out
}

// diverged reports whether the lanes disagree on errno.
func diverged(rs []session.LaneResult) bool {
	for _, r := range rs[min(1, len(rs)):] {
		if r.Errno != rs[0].Errno {
			return true
		}
	}
	return false
}

func eventProto(e session.Event) *themisv1.Event {
	out := &themisv1.Event{
		Seq:          e.Seq,
		SessionId:    e.Session,
		Time:         timestamp(e.Time),
		Kind:         e.Kind,
		Detail:       e.Detail,
		CheckpointId: e.Checkpoint,
	}
	if len(e.Results) > 0 {
		out.Results = laneResultsProto(e.Results)
	}
	return out
}

// Proto -> domain.

// opRequest converts an API Op into the agent request carrying the same op
// message. field is the request field holding op, for error messages.
func opRequest(field string, op *themisv1.Op) (*agentv1.Request, error) {
	if op == nil {
		return nil, errkind.Invalid(field, "required")
	}
	var req agentv1.Request
	switch o := op.Op.(type) {
	case nil:
		return nil, errkind.Invalid(field, "no operation set")
	case *themisv1.Op_Create:
		req.Op = &agentv1.Request_Create{Create: orEmpty(o.Create)}
	case *themisv1.Op_Write:
		req.Op = &agentv1.Request_Write{Write: orEmpty(o.Write)}
	case *themisv1.Op_Truncate:
		req.Op = &agentv1.Request_Truncate{Truncate: orEmpty(o.Truncate)}
	case *themisv1.Op_Unlink:
		req.Op = &agentv1.Request_Unlink{Unlink: orEmpty(o.Unlink)}
	case *themisv1.Op_Mkdir:
		req.Op = &agentv1.Request_Mkdir{Mkdir: orEmpty(o.Mkdir)}
	case *themisv1.Op_Rmdir:
		req.Op = &agentv1.Request_Rmdir{Rmdir: orEmpty(o.Rmdir)}
	case *themisv1.Op_Chmod:
		req.Op = &agentv1.Request_Chmod{Chmod: orEmpty(o.Chmod)}
	case *themisv1.Op_Chown:
		req.Op = &agentv1.Request_Chown{Chown: orEmpty(o.Chown)}
	case *themisv1.Op_Setxattr:
		req.Op = &agentv1.Request_Setxattr{Setxattr: orEmpty(o.Setxattr)}
	case *themisv1.Op_Removexattr:
		req.Op = &agentv1.Request_Removexattr{Removexattr: orEmpty(o.Removexattr)}
	case *themisv1.Op_Rename:
		req.Op = &agentv1.Request_Rename{Rename: orEmpty(o.Rename)}
	case *themisv1.Op_Link:
		req.Op = &agentv1.Request_Link{Link: orEmpty(o.Link)}
	case *themisv1.Op_Symlink:
		req.Op = &agentv1.Request_Symlink{Symlink: orEmpty(o.Symlink)}
	case *themisv1.Op_Utimens:
		req.Op = &agentv1.Request_Utimens{Utimens: orEmpty(o.Utimens)}
	case *themisv1.Op_Fsync:
		req.Op = &agentv1.Request_Fsync{Fsync: orEmpty(o.Fsync)}
	case *themisv1.Op_Sync:
		req.Op = &agentv1.Request_Sync{Sync: orEmpty(o.Sync)}
	case *themisv1.Op_DropCaches:
		req.Op = &agentv1.Request_DropCaches{DropCaches: orEmpty(o.DropCaches)}
	case *themisv1.Op_SetClock:
		req.Op = &agentv1.Request_SetClock{SetClock: orEmpty(o.SetClock)}
	case *themisv1.Op_Umount:
		req.Op = &agentv1.Request_Umount{Umount: orEmpty(o.Umount)}
	case *themisv1.Op_Mount:
		req.Op = &agentv1.Request_Mount{Mount: orEmpty(o.Mount)}
	default:
		// A oneof member added to the proto but not here.
		return nil, errkind.Invalid(field, "unsupported operation %T", o)
	}
	return &req, nil
}

// orEmpty returns m, or a new empty message when a client set the oneof
// member without a value (the wire form of both is the same).
func orEmpty[T any, P interface{ *T }](m P) P {
	if m == nil {
		return new(T)
	}
	return m
}

// opName is the oneof field name of op ("mkdir", "drop_caches"), for metrics.
func opName(op *themisv1.Op) string {
	od := op.ProtoReflect().Descriptor().Oneofs().ByName("op")
	if fd := op.ProtoReflect().WhichOneof(od); fd != nil {
		return string(fd.Name())
	}
	return "none"
}

func originDomain(field string, o themisv1.Checkpoint_Origin) (session.Origin, error) {
	switch o {
	case themisv1.Checkpoint_ORIGIN_UNSPECIFIED, themisv1.Checkpoint_ORIGIN_MANUAL:
		return session.OriginManual, nil
	case themisv1.Checkpoint_ORIGIN_AUTO:
		return session.OriginAuto, nil
	default:
		return "", errkind.Invalid(field, "unknown origin %d", int32(o))
	}
}
