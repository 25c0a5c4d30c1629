package ingest

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streams serves Profile and Corrupt from canned messages and records the
// requests.
type streams struct {
	themisv1.UnimplementedThemisServer
	profile []*themisv1.ProfileResponse
	corrupt []*themisv1.CorruptResponse
	fail    bool // Corrupt fails after its messages

	profileReq *themisv1.ProfileRequest
	corruptReq *themisv1.CorruptRequest
}

func (s *streams) Profile(req *themisv1.ProfileRequest, st grpc.ServerStreamingServer[themisv1.ProfileResponse]) error {
	s.profileReq = req
	for _, m := range s.profile {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (s *streams) Corrupt(req *themisv1.CorruptRequest, st grpc.ServerStreamingServer[themisv1.CorruptResponse]) error {
	s.corruptReq = req
	for _, m := range s.corrupt {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	if s.fail {
		return status.Error(codes.Aborted, "guest died")
	}
	return nil
}

// serve runs srv on a unix socket for the test's life and connects to it.
func serve(t *testing.T, srv themisv1.ThemisServer) *client.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	themisv1.RegisterThemisServer(gs, srv)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c, err := client.Dial(context.Background(), "unix://"+sock, client.Options{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestCollect(t *testing.T) {
	t.Parallel()
	row := &themisv1.ProfileRow{Lane: "ext2", Op: "write f 0 1 0x55", Bytes: 1, SectorsWritten: 2,
		WrittenLbas: []*themisv1.LBARange{{First: 1026, Count: 2, Region: "data"}}}
	layout := &themisv1.LaneLayout{Lane: "ext2", Parsed: []*themisv1.LBARange{{First: 0, Count: 2, Region: "boot"}}}
	result := &themisv1.CorruptResult{Lane: "ext2", Target: "superblock.magic", Lba: 2, Offset: 56, Class: "fatal"}
	profile := []*themisv1.ProfileResponse{
		{Event: &themisv1.ProfileResponse_Row{Row: row}},
		{Event: &themisv1.ProfileResponse_Summary{Summary: &themisv1.ProfileSummary{SessionId: "s-1", ElapsedS: 3, Layouts: []*themisv1.LaneLayout{layout}}}},
	}
	corrupt := []*themisv1.CorruptResponse{
		{Event: &themisv1.CorruptResponse_Result{Result: result}},
		{Event: &themisv1.CorruptResponse_Summary{Summary: &themisv1.CorruptSummary{SessionId: "s-2", ElapsedS: 5, Results: 1}}},
	}
	tests := []struct {
		name     string
		srv      *streams
		job      Job
		wantErr  string
		wantNote string
		sweep    bool
	}{
		{
			name: "sweep", srv: &streams{profile: profile, corrupt: corrupt},
			job:      Job{Lanes: []string{"ext2"}, Ops: []string{row.Op}, MemoryMiB: 96},
			wantNote: "Profile: 1 rows in 3 s (session s-1); corruption: 1 results in 5 s (session s-2).", sweep: true,
		},
		{
			name: "targets", srv: &streams{profile: profile, corrupt: corrupt},
			job:      Job{Lanes: []string{"ext2"}, Ops: []string{row.Op}, Targets: []string{"superblock.magic"}},
			wantNote: "Profile: 1 rows in 3 s (session s-1); corruption: 1 results in 5 s (session s-2).",
		},
		{name: "profile without summary", srv: &streams{profile: profile[:1], corrupt: corrupt}, wantErr: "profile: the stream ended without a summary"},
		{name: "corrupt without summary", srv: &streams{profile: profile, corrupt: corrupt[:1]}, wantErr: "corrupt: the stream ended without a summary"},
		{name: "corrupt fails", srv: &streams{profile: profile, corrupt: corrupt, fail: true}, wantErr: "corrupt: rpc error: code = Aborted desc = guest died"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := serve(t, tt.srv)
			var steps []string
			var rows, results int
			obs := Observer{
				Step:   func(s string) { steps = append(steps, s) },
				Row:    func(*themisv1.ProfileRow) { rows++ },
				Result: func(*themisv1.CorruptResult) { results++ },
			}
			r, err := Collect(context.Background(), c, tt.job, obs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Collect: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			if r.Note != tt.wantNote {
				t.Errorf("note %q, want %q", r.Note, tt.wantNote)
			}
			got := countsOf(r)
			if diff := cmp.Diff(counts{Layouts: []string{"ext2"}, Inferred: []int{0}, Profile: 1, Blast: 1}, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if rows != 1 || results != 1 || len(steps) != 2 {
				t.Errorf("observer saw %d rows, %d results, steps %q; want 1, 1 and two steps", rows, results, steps)
			}
			if tt.srv.corruptReq.GetSweep() != tt.sweep || tt.srv.profileReq.GetMemoryMib() != tt.job.MemoryMiB {
				t.Errorf("requests %v, %v: want sweep %v", tt.srv.profileReq, tt.srv.corruptReq, tt.sweep)
			}
		})
	}
}
