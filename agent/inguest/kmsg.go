package inguest

import (
	"bytes"
	"strconv"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// maxKmsgLines caps the lines of one Kmsg response; the host asks again with
// the last sequence number to get more.
const maxKmsgLines = 1000

// parseKmsg parses one /dev/kmsg record: "prio,seq,ts,flags[,...];text\n"
// followed by optional " KEY=value" continuation lines, which are dropped.
// The level is prio's low three bits.
func parseKmsg(rec []byte) (*agentv1.KmsgLine, bool) {
	hdr, text, ok := bytes.Cut(rec, []byte{';'})
	if !ok {
		return nil, false
	}
	fields := bytes.SplitN(hdr, []byte{','}, 3)
	if len(fields) < 3 {
		return nil, false
	}
	prio, err := strconv.ParseUint(string(fields[0]), 10, 32)
	if err != nil {
		return nil, false
	}
	seq, err := strconv.ParseUint(string(fields[1]), 10, 64)
	if err != nil {
		return nil, false
	}
	if i := bytes.IndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	}
	return &agentv1.KmsgLine{Seq: seq, Level: uint32(prio & 7), Text: string(text)}, true
}
