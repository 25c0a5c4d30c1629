package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// MaxFrame is the largest serialized message, in bytes, either side sends or
// accepts.
const MaxFrame = 16 << 20

// ReadyLine starts the line the guest's init prints on the console once it
// serves the agent channel; the VMM backends wait for it before the first call.
const ReadyLine = "themis-agent: ready"

// frameChunk is how much of a frame ReadFrame allocates before the bytes
// arrive, so that a peer announcing a large frame and then stopping does not
// cost MaxFrame bytes.
const frameChunk = 64 << 10

var (
	// ErrFrameTooLarge reports a frame whose length exceeds MaxFrame.
	ErrFrameTooLarge = errors.New("agent: frame too large")
	// ErrDecode reports a frame of the right length whose bytes are not a
	// valid message. The stream is still in sync after it.
	ErrDecode = errors.New("agent: malformed frame")
)

// WriteFrame writes m as one frame with a single Write call.
func WriteFrame(w io.Writer, m proto.Message) error {
	buf := make([]byte, 4, 4+proto.Size(m))
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return fmt.Errorf("agent: encode frame: %w", err)
	}
	n := len(buf) - 4
	if n > MaxFrame {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, MaxFrame)
	}
	binary.BigEndian.PutUint32(buf[:4], uint32(n))
	wn, err := w.Write(buf)
	if err != nil {
		return fmt.Errorf("agent: write frame: %w", err)
	}
	if wn != len(buf) {
		return fmt.Errorf("agent: write frame: %w", io.ErrShortWrite)
	}
	return nil
}

// ReadFrame reads one frame into m. It returns io.EOF when r ends cleanly
// before a frame, an error wrapping io.ErrUnexpectedEOF when r ends inside a
// frame, one wrapping ErrFrameTooLarge (before reading or allocating the
// body) when the length exceeds MaxFrame, and one wrapping ErrDecode when the
// body is not a valid message.
func ReadFrame(r io.Reader, m proto.Message) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return fmt.Errorf("agent: read frame header: %w", err)
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > MaxFrame {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n, MaxFrame)
	}
	buf := make([]byte, 0, min(n, frameChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		have := len(buf)
		buf = buf[:cap(buf)]
		if _, err := io.ReadFull(r, buf[have:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("agent: read frame body (%d bytes): %w", n, err)
		}
	}
	if err := proto.Unmarshal(buf, m); err != nil {
		return fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return nil
}
