package crashcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/themisfs/themis/agent"
	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/crash"
	"github.com/themisfs/themis/family"
	"github.com/themisfs/themis/hostfsck"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/overlay"
	"github.com/themisfs/themis/session"
	"golang.org/x/sys/unix"
)

// Unmountable is the verdict of a crash state the guest's kernel would not
// mount.
const Unmountable = "unmountable"

// checkMounted checks st in the guest: the lane's spare disk mirrors the
// crash view, the guest mounts it (the kernel's journal or log replay runs
// there, in the real driver), reads what the trace's last fsync made
// durable, and unmounts; then the host checker runs on the image the
// unmount left.
func (lc *laneCheck) checkMounted(ctx context.Context, run *session.Run, st crash.State) (checked, error) {
	r := checked{Result: Result{State: st}}
	err := run.Spare(ctx, lc.i, "mirror crash state", func(lane, spare *overlay.Device) error {
		v, err := lane.CrashView(st.Keep)
		if err != nil {
			return err
		}
		return spare.Mirror(v)
	})
	if err != nil {
		return r, err
	}
	resp, err := lc.mountSpare(ctx, run)
	if err != nil {
		return r, err
	}
	if err := agent.ResponseError(resp); err != nil {
		r.Verdict, r.Output = Unmountable, err.Error()
		return r, nil
	}
	got, nameOnly, err := lc.readDurable(ctx, run)
	if err == nil {
		r.Atomicity, err = lc.atomicity(ctx, run)
	}
	if uerr := lc.umount(ctx, run); err == nil {
		err = uerr
	}
	if err != nil {
		return r, err
	}
	if lc.dur != nil && !lc.dur.datasync && r.State.Flushes >= lc.dur.flushes {
		r.inGuestDurable, r.lost, r.nameOnly = true, got, nameOnly
	}
	return r, lc.fsckSpare(ctx, run, &r)
}

// mountSpare mounts the spare disk. A filesystem that refuses a second
// device with a mounted one's id (btrfs: EEXIST; the spare is a copy of
// the lane) gets the lane unmounted first, once per check (laneDown:
// remountLane mounts it again).
func (lc *laneCheck) mountSpare(ctx context.Context, run *session.Run) (*agentv1.Response, error) {
	req := &agentv1.Request{Op: &agentv1.Request_Mount{Mount: lc.mount}}
	resp, err := run.Call(ctx, "mount crash state", req)
	if err != nil || resp.GetErrno() != int32(unix.EEXIST) || lc.laneDown != "" {
		return resp, err
	}
	lane := run.Lanes()[lc.i]
	if _, err := run.CallOK(ctx, "umount lane for its crash states", &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lane}}}); err != nil {
		return nil, err
	}
	lc.laneDown = lane
	return run.Call(ctx, "mount crash state", req)
}

// remountLane mounts the lane again if mountSpare unmounted it.
func (lc *laneCheck) remountLane(ctx context.Context, run *session.Run) error {
	if lc.laneDown == "" {
		return nil
	}
	lane := lc.laneDown
	lc.laneDown = ""
	_, err := run.CallOK(ctx, "mount lane after its crash states", &agentv1.Request{Op: &agentv1.Request_Mount{Mount: &agentv1.Mount{Lane: lane}}})
	return err
}

// readDurable says what the mounted crash state lost of what the trace's
// final fsync made durable: the file's content, or a directory's names
// ("" nothing; nothing is read after an fdatasync, checked by inode on the
// host). nameOnly: on a filesystem whose fsync does not promise names
// (family.FsyncNameless), all it lost is such a name: the fsync'd path
// does not resolve, or a fsync'd directory's entry names a stale inode.
func (lc *laneCheck) readDurable(ctx context.Context, run *session.Run) (lost string, nameOnly bool, err error) {
	d := lc.dur
	if d == nil || d.datasync {
		return "", false, nil
	}
	lane := lc.mount.GetLane()
	if d.entries != nil {
		var got []string
		got, _, err = guestEntries(ctx, run, lane, d.path)
		lost = d.lostEntries(got)
		nameOnly = staleEntry(err)
	} else {
		var got []byte
		got, _, err = readGuestFile(ctx, run, lane, d.path)
		lost = d.lostIn(got)
	}
	if errors.Is(err, errUnreadable) {
		lost, err = fmt.Sprintf("%s: %v in the crash state", d.path, err), nil
	}
	if nameless, _ := family.FsyncNameless(lc.fs); !nameless || lost == "" || err != nil {
		return lost, false, err
	}
	if !nameOnly {
		nameOnly, err = guestGone(ctx, run, lane, d.path)
	}
	return lost, nameOnly, err
}

// atomicity is the op boundary the mounted state's root equals ("op k"),
// NotAtBoundary, or "" without the atomic check; a state the kernel
// cannot walk is at none.
func (lc *laneCheck) atomicity(ctx context.Context, run *session.Run) (string, error) {
	if lc.bounds == nil {
		return "", nil
	}
	root, err := laneRoot(ctx, run, lc.mount.GetLane())
	if errors.Is(err, errUnreadable) {
		return NotAtBoundary, nil
	}
	if err != nil {
		return "", err
	}
	for k, b := range lc.bounds {
		if bytes.Equal(b, root) {
			return fmt.Sprintf("op %d", k), nil
		}
	}
	return NotAtBoundary, nil
}

func (lc *laneCheck) umount(ctx context.Context, run *session.Run) error {
	_, err := run.CallOK(ctx, "umount crash state", &agentv1.Request{Op: &agentv1.Request_Umount{Umount: &agentv1.Umount{Lane: lc.mount.GetLane()}}})
	if err != nil {
		return fmt.Errorf("crash state: %w", err)
	}
	return nil
}

// fsckSpare runs the host checker on the spare disk's image, as the
// guest's unmount left it.
func (lc *laneCheck) fsckSpare(ctx context.Context, run *session.Run, r *checked) error {
	err := run.Spare(ctx, lc.i, "write crash state", func(_, spare *overlay.Device) error {
		return scratch.WriteImage(lc.img, spare, spare.Size())
	})
	if err != nil {
		return err
	}
	verdict, out, err := lc.tool.Run(ctx, lc.img)
	if err != nil {
		return err
	}
	r.Verdict = verdictOf(verdict)
	if r.Verdict != Clean {
		r.Output = hostfsck.Truncate(out, hostfsck.MaxOutput)
	}
	return nil
}

func verdictOf(v hostfsck.Verdict) string {
	switch v {
	case hostfsck.Clean:
		return Clean
	case hostfsck.Dirty:
		return Dirty
	}
	return Broken
}
