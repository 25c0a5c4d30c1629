package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// TestReplayRPC: Replay looks the finding up, hands it and the image to
// the domain, and returns its result; a missing id is InvalidArgument
// naming finding_id, an unknown one NotFound.
func TestReplayRPC(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, f))
	for _, tc := range []struct {
		id   string
		code codes.Code
	}{{"", codes.InvalidArgument}, {"f-nope", codes.NotFound}} {
		_, err := c.Replay(context.Background(), &themisv1.ReplayRequest{FindingId: tc.id})
		if status.Code(err) != tc.code || (tc.code == codes.InvalidArgument && !strings.Contains(err.Error(), "finding_id")) {
			t.Errorf("Replay(%q): %v, want %v", tc.id, err, tc.code)
		}
	}
	if _, err := c.Replay(context.Background(), &themisv1.ReplayRequest{FindingId: "f-1", Image: "bug-x", Stock: true}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "stock") {
		t.Errorf("Replay with an image and stock: %v, want InvalidArgument naming stock", err)
	}
	resp, err := c.Replay(context.Background(), &themisv1.ReplayRequest{FindingId: "f-1", Image: "bug-x"})
	if err != nil {
		t.Fatal(err)
	}
	if f.replayed != [2]string{"f-1", "bug-x"} {
		t.Errorf("the domain replayed %v, want f-1 on bug-x", f.replayed)
	}
	st := resp.GetSteps()
	if !resp.GetReproduced() || !resp.GetErrnoDiverged() || resp.GetSessionId() != "s-9" || len(st) != 1 ||
		!slices.Equal(st[0].GetErrnos(), []string{"ext2=0", "vfat=1"}) || !st[0].GetDiverged() || resp.GetRoots()["vfat"] != "bb" {
		t.Errorf("Replay = %v", resp)
	}
}

// TestBisectRPC: Bisect looks the finding up and returns the domain's rows
// and the first image that differs; a missing id names finding_id, and the
// domain's refusal of too few images names images.
func TestBisectRPC(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	if _, err := c.Bisect(context.Background(), &themisv1.BisectRequest{Images: []string{"a", "b"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "finding_id") {
		t.Errorf("Bisect without a finding: %v, want InvalidArgument naming finding_id", err)
	}
	if _, err := c.Bisect(context.Background(), &themisv1.BisectRequest{FindingId: "f-1", Images: []string{"a"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "images") {
		t.Errorf("Bisect of one image: %v, want InvalidArgument naming images", err)
	}
	resp, err := c.Bisect(context.Background(), &themisv1.BisectRequest{FindingId: "f-1", Images: []string{"a", "b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if rows := resp.GetRows(); len(rows) != 3 || !rows[0].GetReproduced() || rows[1].GetReproduced() || rows[2].GetKernelVersion() != "6.1.2" || rows[2].GetSessionId() != "s-2" || resp.GetFirstDifferingImage() != "b" {
		t.Errorf("Bisect = %v", resp)
	}
}

// TestReplayPassesRPC: a finding's passes take its lanes and trace, lanes
// and a trace given take those; a finding with lanes, or neither, is
// refused naming the field; progress (coalesced) streams before the
// result.
func TestReplayPassesRPC(t *testing.T) {
	t.Parallel()
	f := &fakeDomain{}
	c := themisv1.NewThemisClient(serve(t, f))
	drain := func(req *themisv1.ReplayPassesRequest) (int, *themisv1.PassesResult, error) {
		stream, err := c.ReplayPasses(context.Background(), req)
		if err != nil {
			return 0, nil, err
		}
		n := 0
		for {
			m, err := stream.Recv()
			if err != nil {
				return n, nil, err
			}
			if m.GetProgress() != nil {
				n++
			}
			if r := m.GetResult(); r != nil {
				return n, r, nil
			}
		}
	}
	for _, tc := range []struct {
		req   *themisv1.ReplayPassesRequest
		field string
	}{
		{&themisv1.ReplayPassesRequest{FindingId: "f-1", Lanes: []string{"ext2"}, Passes: 3}, "finding_id"},
		{&themisv1.ReplayPassesRequest{Passes: 3}, "lanes"},
	} {
		if _, _, err := drain(tc.req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: %v, want InvalidArgument naming %s", tc.req, err, tc.field)
		}
	}
	n, r, err := drain(&themisv1.ReplayPassesRequest{Lanes: []string{"ext2"}, Trace: []string{"mkdir d 0755"}, Passes: 3, Clock: "free"})
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 || r.GetBackend() != "qemu" || len(r.GetRows()) != 1 || r.GetRows()[0].GetDistinctDiskHashes()["ext2"] != 3 || r.GetRows()[0].GetDistinctRamHashes() != -1 {
		t.Errorf("%d progress messages, result %v", n, r)
	}
	if f.passes.Clock != "free" || f.passes.N != 3 || !slices.Equal(f.passes.Trace, []string{"mkdir d 0755"}) || f.passes.Finding != "" {
		t.Errorf("the domain ran %+v", f.passes)
	}
}

// TestExportRPC: Export streams a file larger than a chunk in order, an
// executable one, then the summary; a missing id names finding_id, an
// unknown one is NotFound, the domain's refusal names its field.
func TestExportRPC(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	drain := func(req *themisv1.ExportRequest) (map[string][]byte, map[string]bool, *themisv1.ExportSummary, error) {
		files, exec := map[string][]byte{}, map[string]bool{}
		stream, err := c.Export(context.Background(), req)
		if err != nil {
			return nil, nil, nil, err
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				return nil, nil, nil, err
			}
			if fl := m.GetFile(); fl != nil {
				if int64(len(files[fl.GetName()])) != fl.GetOffset() {
					return nil, nil, nil, fmt.Errorf("%s: chunk at %d after %d bytes", fl.GetName(), fl.GetOffset(), len(files[fl.GetName()]))
				}
				files[fl.GetName()] = append(files[fl.GetName()], fl.GetData()...)
				exec[fl.GetName()] = fl.GetExecutable()
			}
			if s := m.GetSummary(); s != nil {
				return files, exec, s, nil
			}
		}
	}
	for _, tc := range []struct {
		req   *themisv1.ExportRequest
		code  codes.Code
		field string
	}{
		{&themisv1.ExportRequest{}, codes.InvalidArgument, "finding_id"},
		{&themisv1.ExportRequest{FindingId: "f-nope"}, codes.NotFound, ""},
		{&themisv1.ExportRequest{FindingId: "f-1", Policy: "lenient"}, codes.InvalidArgument, "policy"},
	} {
		if _, _, _, err := drain(tc.req); status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: %v, want %v naming %q", tc.req, err, tc.code, tc.field)
		}
	}
	files, exec, sum, err := drain(&themisv1.ExportRequest{FindingId: "f-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files["README"]) != 3<<20/2 || string(files["repro.sh"]) != "#!/bin/sh\n" || !exec["repro.sh"] || exec["README"] {
		t.Errorf("files: README %d bytes, repro.sh %q, executable %v", len(files["README"]), files["repro.sh"], exec)
	}
	if !slices.Equal(sum.GetFiles(), []string{"README", "repro.sh"}) || !sum.GetStockReplayed() || sum.GetStockKernel() != "6.1.0" || sum.GetStockReproduced() {
		t.Errorf("summary %v", sum)
	}
}

// TestFootprintRPC: Footprint profiles the finding's last op on the lanes
// asked (its own when none) with the memory asked; a missing id names
// finding_id, negative memory names memory_mib.
func TestFootprintRPC(t *testing.T) {
	t.Parallel()
	c := themisv1.NewThemisClient(serve(t, &fakeDomain{}))
	for _, tc := range []struct {
		req   *themisv1.FootprintRequest
		field string
	}{{&themisv1.FootprintRequest{}, "finding_id"}, {&themisv1.FootprintRequest{FindingId: "f-1", MemoryMib: -1}, "memory_mib"}} {
		if _, err := c.Footprint(context.Background(), tc.req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: %v, want InvalidArgument naming %s", tc.req, err, tc.field)
		}
	}
	resp, err := c.Footprint(context.Background(), &themisv1.FootprintRequest{FindingId: "f-1", Lanes: []string{"ext2", "vfat"}, MemoryMib: 256})
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.GetLanes(); len(l) != 2 || l[1].GetLane() != "vfat" || l[0].GetSectors() != 264 || l[0].GetByRegion()[0].GetRegion() != "data" || resp.GetFindingId() != "f-1" {
		t.Errorf("Footprint = %v", resp)
	}
}
