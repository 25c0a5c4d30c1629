package report

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// Range is a run of 512-byte sectors [First, First+Count) holding one kind
// of structure; Region is an fsimage kind ("superblock",
// "group-descriptors", "inode-table", "data", ...).
type Range struct {
	First  uint64 `json:"first"`
	Count  uint64 `json:"count"`
	Region string `json:"region"`
}

// End returns the sector after the range.
func (r Range) End() uint64 { return r.First + r.Count }

// Layout is one lane's image in the two views of the layout map.
type Layout struct {
	Lane string `json:"lane"`
	// Parsed is the image's regions as fsimage.Layout parses them, sorted
	// by First and covering the image; empty when the input did not carry
	// it (the map then shows the writes alone).
	Parsed []Range `json:"parsed,omitempty"`
	// Inferred is the union of the sectors the profile's ops wrote, in runs
	// labelled by the region holding them.
	Inferred []Range `json:"inferred,omitempty"`
}

// ProfileRow is the I/O profile of one op on one lane (belowfs.ProfileRow).
type ProfileRow struct {
	Lane string `json:"lane"`
	Op   string `json:"op"`
	// Bytes is what the op asked to write (0 for metadata ops).
	Bytes int64 `json:"bytes"`
	// SectorsWritten counts 512-byte sectors the device received from the
	// op and the sync after it; Written lists the distinct sectors by region.
	SectorsWritten int     `json:"sectors_written"`
	Written        []Range `json:"written_lbas,omitempty"`
	// SectorsRead is the cold read cost of the op's path, in sectors over
	// the mount baseline.
	SectorsRead int `json:"sectors_read"`
	// Amplification is SectorsWritten*512 / max(Bytes, 1).
	Amplification float64 `json:"amplification"`
	// Errno is the op's errno in the guest (0: it succeeded).
	Errno int32 `json:"errno,omitempty"`
}

// BlastResult is what one flipped bit did to one lane (belowfs.CorruptResult).
type BlastResult struct {
	Lane   string `json:"lane"`
	Target string `json:"target"`
	// LBA, Offset (byte in the sector) and Bit locate the flipped bit.
	LBA    uint64 `json:"lba"`
	Offset int    `json:"offset"`
	Bit    int    `json:"bit"`
	// Region is the fsimage kind of the sector, Field the structure field.
	Region string `json:"region,omitempty"`
	Field  string `json:"field,omitempty"`
	// Mounted is whether the mount after the flip succeeded; MountError
	// the guest's message when it did not.
	Mounted    bool   `json:"mounted"`
	MountError string `json:"mount_error,omitempty"`
	// KernelLog is the kernel log lines the mount and observation added.
	KernelLog []string `json:"kernel_log,omitempty"`
	// Affected are the paths that differ from the unflipped counterfactual.
	Affected []string `json:"affected,omitempty"`
	// ReadErrno is the first errno reading an affected file (0: none).
	ReadErrno int32 `json:"read_errno,omitempty"`
	// FsckClean is the host fsck's verdict (e2fsck -fn, btrfs check
	// --readonly --check-data-csum); FsckSummary its last lines.
	FsckClean   bool   `json:"fsck_clean"`
	FsckSummary string `json:"fsck_summary,omitempty"`
	// FsckTool is the checker that ran; "" where the lane has none.
	FsckTool string `json:"fsck_tool,omitempty"`
	// Class is the blast-radius class: one of Classes.
	Class string `json:"class"`
}

// Report is everything one page shows. Any part may be empty; its section
// then says so.
type Report struct {
	// Title heads the page (default DefaultTitle).
	Title string `json:"title,omitempty"`
	// Note is a line under the title: how the data was made, when.
	Note    string        `json:"note,omitempty"`
	Layouts []Layout      `json:"layouts,omitempty"`
	Profile []ProfileRow  `json:"profile,omitempty"`
	Blast   []BlastResult `json:"blast,omitempty"`
}

// DefaultTitle is the page title when Report.Title is empty.
const DefaultTitle = "Themis: below the filesystem"

// Class is a blast-radius class with what it means.
type Class struct {
	Name, Meaning string
}

// Classes are the blast-radius classes (belowfs.Class*), most severe first.
var Classes = []Class{
	{"fatal", "the mount fails"},
	{"namespace-loss", "paths vanish while the filesystem stays mounted"},
	{"detected", "a filesystem error in the kernel log (EXTn-fs error, BTRFS checksum failure), or EIO/EUCLEAN/EBADMSG reading an affected file"},
	{"silent-metadata", "a path's metadata (size, mode, links, ...) changed, no error"},
	{"silent-content", "only file content changed, no error"},
	{"none", "nothing observable changed"},
	{"n/a", "the lane's filesystem has no such structure (an ext2/3/4 field on btrfs): nothing flipped"},
}

// Render writes r as one self-contained HTML page to w.
func Render(w io.Writer, r *Report) error {
	if r == nil {
		r = &Report{}
	}
	p := buildPage(r)
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, p); err != nil {
		return fmt.Errorf("report: render: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("report: write: %w", err)
	}
	return nil
}

// kindClasses are the CSS classes of the known region kinds (fsimage.Kind*).
var kindClasses = map[string]string{
	"boot": "k-boot", "superblock": "k-superblock", "padding": "k-padding",
	"group-descriptors": "k-gd", "reserved-gdt": "k-rgdt", "block-bitmap": "k-bbitmap",
	"inode-bitmap": "k-ibitmap", "inode-table": "k-itable", "journal": "k-journal",
	"data": "k-data", "unused": "k-unused", "outside": "k-outside",
}

// kindOrder is the legend's order.
var kindOrder = []string{"boot", "superblock", "padding", "group-descriptors", "reserved-gdt",
	"block-bitmap", "inode-bitmap", "inode-table", "journal", "data", "unused"}

func kindClass(kind string) string {
	if c, ok := kindClasses[kind]; ok {
		return c
	}
	return "k-other"
}

func classClass(class string) string {
	if class == "n/a" {
		return "c-na" // '/' does not belong in a CSS class
	}
	for _, c := range Classes {
		if c.Name == class {
			return "c-" + class
		}
	}
	return "c-other"
}

// humanBytes writes n with a binary unit: "1 B", "4 KiB", "1.5 MiB".
func humanBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	s := fmt.Sprintf("%.1f", n)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + units[i]
}

// sectorRange writes [first, first+count) as "LBA a" or "LBA a–b".
func sectorRange(first, count uint64) string {
	if count <= 1 {
		return fmt.Sprintf("LBA %d", first)
	}
	return fmt.Sprintf("LBA %d–%d", first, first+count-1)
}
