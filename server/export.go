package server

import (
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/runs/export"
)

// exportChunk is the most file bytes one ExportFile message carries.
const exportChunk = 1 << 20

// Export implements themisv1.ThemisServer: the finding's reproducer
// (export.Run), its files in chunks and a crash finding's image streamed,
// then the summary.
func (s *Server) Export(req *themisv1.ExportRequest, stream themisv1.Themis_ExportServer) error {
	if err := required("finding_id", req.GetFindingId()); err != nil {
		return toStatus(err)
	}
	f, err := s.d.Finding(stream.Context(), req.GetFindingId())
	if err != nil {
		return toStatus(err)
	}
	out, ctx := newRunStream(s, "export", stream, func(*themisv1.ExportResponse) bool { return false })
	sum, err := s.d.Export(ctx, f, export.Options{Policy: req.GetPolicy(), Format: req.GetFormat(), FSTestsTest: req.GetFstestsTest(), FSTestsLane: req.GetFstestsLane()}, export.Sinks{
		File: func(name string, exec bool, data []byte) error {
			for off := 0; off == 0 || off < len(data); off += exportChunk {
				end := min(off+exportChunk, len(data))
				out.send(&themisv1.ExportResponse{Event: &themisv1.ExportResponse_File{File: &themisv1.ExportFile{
					Name: name, Executable: exec, Offset: int64(off), Data: data[off:end], Size: int64(len(data))}}})
			}
			return ctx.Err()
		},
		Image: func(off int64, data []byte, size int64) error {
			out.send(&themisv1.ExportResponse{Event: &themisv1.ExportResponse_Image{Image: &themisv1.CrashImageChunk{
				Lane: export.CrashImage, Offset: off, Data: data, Size: size}}})
			return ctx.Err()
		},
	})
	return out.end(err, func() *themisv1.ExportResponse {
		ps := &themisv1.ExportSummary{FindingId: sum.Finding, Kind: sum.Kind, Files: sum.Files, CrashReproduced: sum.CrashReproduced}
		if st := sum.Stock; st != nil {
			ps.StockReplayed, ps.StockKernel, ps.StockReproduced = true, st.Kernel, st.Reproduced
		}
		return &themisv1.ExportResponse{Event: &themisv1.ExportResponse_Summary{Summary: ps}}
	})
}
