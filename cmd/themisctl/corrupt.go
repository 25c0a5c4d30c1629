package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// corruptHeader and writeCorruptRow print one corrupt result per line.
const corruptHeader = "LANE\tTARGET\tLBA:BYTE.BIT\tREGION/FIELD\tCLASS\tMOUNTED\tFSCK\tAFFECTED\n"

func writeCorruptRow(w io.Writer, res *themisv1.CorruptResult) {
	if res.GetClass() == api.ClassNotApplicable {
		fmt.Fprintf(w, "%s\t%s\t-\t%s\t%s\t-\t-\t\n", res.GetLane(), res.GetTarget(), res.GetField(), res.GetClass())
		return
	}
	if k := res.GetKernel(); k != nil || res.GetClass() == api.Hung || res.GetClass() == api.Died {
		what := strings.Join(res.GetKernelLog()[:min(1, len(res.GetKernelLog()))], "")
		if k != nil {
			what = reportOf(k).Summary() // the whole report: --json
		}
		fmt.Fprintf(w, "%s\t%s\t%d:%d.%d\t%s %s\t%s\t-\t-\t%s\n", res.GetLane(), res.GetTarget(), res.GetLba(), res.GetOffset(), res.GetBit(),
			res.GetRegion(), res.GetField(), res.GetClass(), what)
		return
	}
	fsck := "clean"
	switch {
	case res.GetFsckTool() == "" && strings.HasPrefix(res.GetFsckSummary(), "no host checker"):
		fsck = "-" // the lane's filesystem has none
	case !res.GetFsckClean():
		fsck = "errors"
	}
	affected := strings.Join(res.GetAffected(), " ")
	if e := res.GetReadErrno(); e != 0 {
		affected += fmt.Sprintf(" (read errno %d)", e)
	}
	fmt.Fprintf(w, "%s\t%s\t%d:%d.%d\t%s %s\t%s\t%v\t%s\t%s\n", res.GetLane(), res.GetTarget(), res.GetLba(), res.GetOffset(), res.GetBit(),
		res.GetRegion(), res.GetField(), res.GetClass(), res.GetMounted(), fsck, strings.TrimSpace(affected))
}

// writeBlastTable prints the results side by side, Table 11 style: a row
// per target in first-seen order, a column per lane, the class in each
// cell ("-" where a lane has no result).
func writeBlastTable(w io.Writer, results []*themisv1.CorruptResult) {
	var lanes, targets []string
	seenLane, seenTarget := map[string]bool{}, map[string]bool{}
	cell := map[[2]string]string{}
	for _, r := range results {
		if !seenLane[r.GetLane()] {
			seenLane[r.GetLane()] = true
			lanes = append(lanes, r.GetLane())
		}
		if !seenTarget[r.GetTarget()] {
			seenTarget[r.GetTarget()] = true
			targets = append(targets, r.GetTarget())
		}
		cell[[2]string{r.GetTarget(), r.GetLane()}] = r.GetClass()
	}
	fmt.Fprintf(w, "\nBLAST RADIUS\t%s\n", strings.Join(lanes, "\t"))
	for _, t := range targets {
		row := []string{t}
		for _, l := range lanes {
			c := cell[[2]string{t, l}]
			if c == "" {
				c = "-"
			}
			row = append(row, c)
		}
		fmt.Fprintf(w, "%s\n", strings.Join(row, "\t"))
	}
}
