// Package agent speaks the host<->guest agent protocol (themis.agent.v1):
// the frames both ends exchange and the host's end.
//
// Frames ([WriteFrame], [ReadFrame]) are a 4-byte big-endian length followed
// by one serialized protobuf message of at most [MaxFrame] bytes.
// [NewRequest] wraps an operation message in a Request; the Open* flags are
// the Linux open(2) bits Write and Create carry; [ReadyLine] is what the
// guest's init prints once it serves.
//
// [Client] is the host side: it owns a byte stream to the guest (a net.Conn
// to QEMU's chardev socket), sends one request at a time and waits for the
// response with the same id. A call that times out or fails on the stream
// leaves the stream in an unknown position, so the client is then broken:
// every later call fails with [ErrBroken] and the machine should be treated
// as failed. A reply the agent could not honestly have sent (a frame that
// does not decode or is longer than MaxFrame, an id not yet asked for,
// more than 64 stale replies) wraps [ErrBadResponse], which a session takes
// for a dead guest. A non-zero errno in a response is the operation's
// result, not a failure of the call; [ResponseError] turns it into an [Error].
//
// The guest side, the Server that cmd/themis-agent runs as PID 1, is package
// agent/inguest; this package does not import it, so the host reaches none of
// what only the guest needs.
//
// Concurrency: Client methods may be called from several goroutines (calls
// are serialized).
package agent
