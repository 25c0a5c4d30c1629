package ingest

import (
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report"
)

// Ranges converts the API's LBA ranges (the path is dropped).
func Ranges(in []*themisv1.LBARange) []report.Range {
	out := make([]report.Range, 0, len(in))
	for _, r := range in {
		out = append(out, report.Range{First: r.GetFirst(), Count: r.GetCount(), Region: r.GetRegion()})
	}
	return out
}

// Layout converts one lane's layout from a ProfileSummary.
func Layout(l *themisv1.LaneLayout) report.Layout {
	return report.Layout{Lane: l.GetLane(), Parsed: Ranges(l.GetParsed()), Inferred: Ranges(l.GetInferred())}
}

// ProfileRow converts one row of the Profile stream.
func ProfileRow(r *themisv1.ProfileRow) report.ProfileRow {
	return report.ProfileRow{Lane: r.GetLane(), Op: r.GetOp(), Bytes: r.GetBytes(), SectorsWritten: int(r.GetSectorsWritten()),
		Written: Ranges(r.GetWrittenLbas()), SectorsRead: int(r.GetSectorsRead()), Amplification: r.GetAmplification(), Errno: r.GetErrno()}
}

// BlastResult converts one result of the Corrupt stream.
func BlastResult(r *themisv1.CorruptResult) report.BlastResult {
	return report.BlastResult{Lane: r.GetLane(), Target: r.GetTarget(), LBA: r.GetLba(), Offset: int(r.GetOffset()), Bit: int(r.GetBit()),
		Region: r.GetRegion(), Field: r.GetField(), Mounted: r.GetMounted(), MountError: r.GetMountError(), KernelLog: r.GetKernelLog(),
		Affected: r.GetAffected(), ReadErrno: r.GetReadErrno(), FsckClean: r.GetFsckClean(), FsckSummary: r.GetFsckSummary(), FsckTool: r.GetFsckTool(), Class: r.GetClass()}
}
