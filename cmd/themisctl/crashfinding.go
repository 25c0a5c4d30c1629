package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
)

// printCrashPoint shows a crash finding's state: the setup, the
// persistence point, the writes kept and the checker's verdict.
func printCrashPoint(w io.Writer, f *themisv1.Finding) {
	c := f.GetCrash()
	if c == nil {
		return
	}
	sync := ", no sync after it"
	if c.GetSetupSync() {
		sync = ", then sync"
	}
	fmt.Fprintf(w, "  lane %s (%s); setup: %s%s\n", c.GetLane(), strings.Join(f.GetLaneSpecs(), ","), orNone(strings.Join(c.GetSetup(), "; ")), sync)
	fmt.Fprintf(w, "  persistence point: the log held %d writes, %d flushes when the trace's last op returned\n", c.GetWrites(), c.GetLogFlushes())
	fmt.Fprintf(w, "  crash state: after %d flush(es), %s, keeps writes %v (epoch %v): %s", c.GetFlushes(), c.GetKind(), c.GetKeep(), c.GetEpoch(), c.GetVerdict())
	if d := c.GetDurability(); d != "" {
		fmt.Fprintf(w, "; durability %s", d)
	}
	fmt.Fprintf(w, " (%d of %d crash states bad)\n", c.GetNotClean(), c.GetStates())
}

// crashOf is the Crash request that checks f's one state again (its
// image streamed when image).
func crashOf(f *themisv1.Finding, image bool) *themisv1.CrashRequest {
	c := f.GetCrash()
	return &themisv1.CrashRequest{Lanes: f.GetLaneSpecs(), Setup: c.GetSetup(), NoSetupSync: !c.GetSetupSync(), Trace: f.GetTrace(),
		Only: &themisv1.CrashKeep{Keep: c.GetKeep()}, StreamImage: image, Minimize: -1, Image: findingImage(f, "")}
}

// replayCrash runs f's setup and trace in a fresh session and checks the
// crash state it keeps: reproduced when it is bad the same way (not
// clean, or lost what was made durable). img (nil for none) keeps the
// state's disk.
func replayCrash(ctx context.Context, c *conn, f *themisv1.Finding, img *imageFile) (*themisv1.CrashReplay, error) {
	progress(fmt.Sprintf("replaying crash finding %s on %s: setup, trace, crash state %v", f.GetId(), strings.Join(f.GetLaneSpecs(), ","), f.GetCrash().GetKeep()))
	if img != nil {
		defer img.close()
	}
	res, sum, err := crashOnce(ctx, c, crashOf(f, img != nil), img)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", f.GetId(), err)
	}
	rep := &themisv1.CrashReplay{FindingId: f.GetId(), SessionId: sum.GetSessionId(), Result: res, Reproduced: crashReproduced(f, res), Keep: f.GetCrash().GetKeep()}
	return rep, img.finish()
}

// crashReproduced says whether res, the replay of crash finding f's
// state, is bad the same way: it lost what was made durable again, it
// lost the guest the same way (a kernel crash: a report of the same
// signature), or it is not clean again.
func crashReproduced(f *themisv1.Finding, res *themisv1.CrashResult) bool {
	was := f.GetCrash().GetVerdict()
	switch {
	case strings.HasPrefix(f.GetCrash().GetDurability(), "LOST"):
		return strings.HasPrefix(res.GetDurability(), "LOST")
	case was == api.KernelCrash:
		return res.GetVerdict() == was && reportOf(res.GetKernel()).Signature() == reportOf(f.GetKernel()).Signature()
	case was == api.Hung || was == api.Died:
		return res.GetVerdict() == was
	}
	return res.GetVerdict() == api.CrashDirty || res.GetVerdict() == api.CrashBroken
}

// crashOnce runs req (one state) and returns its one result and the
// summary; image chunks go to img.
func crashOnce(ctx context.Context, c *conn, req *themisv1.CrashRequest, img *imageFile) (*themisv1.CrashResult, *themisv1.CrashSummary, error) {
	stream, err := c.Crash(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var res *themisv1.CrashResult
	var sum *themisv1.CrashSummary
	err = client.Drain(stream.Recv, func(r *themisv1.CrashResponse) error {
		switch {
		case r.GetResult() != nil:
			res = r.GetResult()
		case r.GetSummary() != nil:
			sum = r.GetSummary()
		case r.GetImage() != nil && img != nil:
			return img.write(r.GetImage())
		}
		return nil
	})
	if err == nil && (res == nil || sum == nil) {
		err = fmt.Errorf("the daemon ended the stream without the state's result and a summary")
	}
	return res, sum, err
}

// replayCrashCmd is `themisctl replay` of a crash finding.
func replayCrashCmd(ctx context.Context, g *globals, c *conn, f *themisv1.Finding, image string) error {
	var img *imageFile
	if image != "" {
		img = &imageFile{path: image}
	}
	rep, err := replayCrash(ctx, c, f, img)
	if err != nil {
		return err
	}
	if g.json {
		return writeProtoJSON(rep)
	}
	return printCrashReplay(rep)
}

func printCrashReplay(r *themisv1.CrashReplay) error {
	w := newTable()
	res := r.GetResult()
	fmt.Fprintf(w, "session\t%s\nlane\t%s\ncrash state\tkeeps writes %v\nverdict\t%s\n", r.GetSessionId(), res.GetLane(), r.GetKeep(), res.GetVerdict())
	if res.GetDurability() != "" {
		fmt.Fprintf(w, "durability\t%s\n", res.GetDurability())
	}
	lines := strings.Split(strings.TrimSpace(res.GetOutput()), "\n")
	for _, line := range lines[:min(5, len(lines))] {
		if line != "" {
			fmt.Fprintf(w, "\t%s\n", line)
		}
	}
	fmt.Fprintf(w, "reproduced\t%v\n", r.GetReproduced())
	return w.Flush()
}

// imageFile is a crash state's image written from its chunks: sparse, cut
// to its size at the end.
type imageFile struct {
	path string
	// root, when set, holds path: it is made there as a new file
	// (findings export), never through a symlink nor over a file.
	root *os.Root
	f    *os.File
	size int64
}

// open creates the image file.
func (m *imageFile) open() (*os.File, error) {
	if m.root != nil {
		return m.root.OpenFile(m.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	}
	return os.OpenFile(m.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
}

func (m *imageFile) write(ch *themisv1.CrashImageChunk) error {
	if m.f == nil {
		f, err := m.open()
		if err != nil {
			return fmt.Errorf("crash image: %w", err)
		}
		m.f = f
	}
	if ch.GetSize() < 0 || ch.GetOffset() < 0 || ch.GetOffset()+int64(len(ch.GetData())) > ch.GetSize() {
		return fmt.Errorf("crash image: chunk at %d of %d bytes past the image's size %d", ch.GetOffset(), len(ch.GetData()), ch.GetSize())
	}
	m.size = ch.GetSize()
	if _, err := m.f.WriteAt(ch.GetData(), ch.GetOffset()); err != nil {
		return fmt.Errorf("crash image: %w", err)
	}
	return nil
}

// finish cuts the image to its size and closes it (nil: nothing to do).
func (m *imageFile) finish() error {
	if m == nil || m.f == nil {
		return nil
	}
	err := m.f.Truncate(m.size)
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	m.f = nil
	if err != nil {
		return fmt.Errorf("crash image: %w", err)
	}
	return nil
}

// close closes the image after a failure (finish did not run).
func (m *imageFile) close() {
	if m != nil && m.f != nil {
		m.f.Close()
	}
}
