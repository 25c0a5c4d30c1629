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

// Page is r as `themisctl --json report` prints it: the page's data,
// which Load reads back to the same page.
func Page(r *report.Report) *themisv1.ReportPage {
	p := &themisv1.ReportPage{Title: r.Title, Note: r.Note}
	for _, l := range r.Layouts {
		p.Layouts = append(p.Layouts, &themisv1.LaneLayout{Lane: l.Lane, Parsed: rangesProto(l.Parsed), Inferred: rangesProto(l.Inferred)})
	}
	for _, row := range r.Profile {
		p.Profile = append(p.Profile, &themisv1.ProfileRow{Lane: row.Lane, Op: row.Op, Bytes: row.Bytes, SectorsWritten: int32(row.SectorsWritten),
			WrittenLbas: rangesProto(row.Written), SectorsRead: int32(row.SectorsRead), Amplification: row.Amplification, Errno: row.Errno})
	}
	for _, b := range r.Blast {
		p.Blast = append(p.Blast, &themisv1.CorruptResult{Lane: b.Lane, Target: b.Target, Lba: b.LBA, Offset: int32(b.Offset), Bit: int32(b.Bit),
			Region: b.Region, Field: b.Field, Mounted: b.Mounted, MountError: b.MountError, KernelLog: b.KernelLog, Affected: b.Affected,
			ReadErrno: b.ReadErrno, FsckClean: b.FsckClean, FsckSummary: b.FsckSummary, FsckTool: b.FsckTool, Class: b.Class})
	}
	return p
}

// FromPage converts a page's data back (Page's inverse).
func FromPage(p *themisv1.ReportPage) *report.Report {
	r := &report.Report{Title: p.GetTitle(), Note: p.GetNote()}
	for _, l := range p.GetLayouts() {
		r.Layouts = append(r.Layouts, Layout(l))
	}
	for _, row := range p.GetProfile() {
		r.Profile = append(r.Profile, ProfileRow(row))
	}
	for _, b := range p.GetBlast() {
		r.Blast = append(r.Blast, BlastResult(b))
	}
	return r
}

func rangesProto(in []report.Range) []*themisv1.LBARange {
	var out []*themisv1.LBARange
	for _, r := range in {
		out = append(out, &themisv1.LBARange{First: r.First, Count: r.Count, Region: r.Region})
	}
	return out
}
