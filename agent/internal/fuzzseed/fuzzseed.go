package fuzzseed

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// frame returns m as one frame.
func frame(m proto.Message) ([]byte, error) {
	body, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fuzzseed: encode %T: %w", m, err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...), nil
}

// Frames returns the seeds: no input, a valid write request, truncated and
// oversized frames, garbage of a valid length, and streams of several
// requests with and without a bad frame after them, and a batch holding a
// batch. testdata/fuzz holds the
// same bytes.
func Frames() ([][]byte, error) {
	var fs [5][]byte
	for i, m := range []*agentv1.Request{
		{Id: 7, Op: &agentv1.Request_Write{Write: &agentv1.Write{
			Lane: "ext2", Path: "d-00/f-00", Offset: 4096, Data: []byte("hello")}}},
		{Id: 1, Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}},
		{Id: 2, Op: &agentv1.Request_Fingerprint{Fingerprint: &agentv1.Fingerprint{Lane: "l0", Leaves: true}}},
		{Id: 3, Op: &agentv1.Request_Stat{Stat: &agentv1.Stat{Lane: "l0", Path: "a/../b"}}},
		{Id: 4, Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{Requests: []*agentv1.Request{
			{Id: 5, Op: &agentv1.Request_Ping{Ping: &agentv1.Ping{}}},
			{Id: 6, Op: &agentv1.Request_Batch{Batch: &agentv1.Batch{}}},
		}}}},
	} {
		f, err := frame(m)
		if err != nil {
			return nil, err
		}
		fs[i] = f
	}
	valid, pingF, fp, stat, batch := fs[0], fs[1], fs[2], fs[3], fs[4]
	return [][]byte{
		nil,
		valid,
		valid[:len(valid)-3],
		valid[:2],
		{0x01, 0x00, 0x00, 0x01},
		{0xff, 0xff, 0xff, 0xff, 0},
		{0, 0, 0, 3, 0xff, 0xff, 0xff},
		append(append(append([]byte{}, pingF...), fp...), stat...),
		append(append([]byte{}, pingF...), 0, 0, 0, 2, 0x52, 0x00),
		batch,
	}, nil
}
