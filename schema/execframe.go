package schema

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Exec streams. After `POST /v1/devices/{device}/pods/{pod}/exec` is
// upgraded (Upgrade: ExecUpgradeProtocol, answer 101), the connection
// carries frames in both directions: one type byte, a big-endian uint32
// length, then that many bytes (at most MaxFrameBytes).
//
// Client to hub: FrameStdin (input), FrameStdinEOF (no payload: input
// closed), FrameResize (payload: TermSize JSON). Closing the connection
// cancels the command.
//
// Hub to client: FrameStdout, FrameStderr (output), then exactly one
// FrameExit (payload: ExecExit JSON), after which the hub closes the
// connection.

// ExecUpgradeProtocol is the Upgrade token of an exec stream.
const ExecUpgradeProtocol = "fleet-exec.v1"

// Frame types of an exec stream.
const (
	FrameStdin    byte = 0
	FrameStdout   byte = 1
	FrameStderr   byte = 2
	FrameExit     byte = 3
	FrameResize   byte = 4
	FrameStdinEOF byte = 5
)

// MaxFrameBytes bounds one frame's payload.
const MaxFrameBytes = 64 << 10

// ExecExit ends an exec stream: the command's exit code, or why it could
// not run or went on (Code is one of the Code constants, Error says it
// for people).
type ExecExit struct {
	ExitCode int    `json:"exitCode"`
	Code     string `json:"code,omitempty"`
	Error    string `json:"error,omitempty"`
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrameBytes {
		return fmt.Errorf("exec frame: %d bytes, at most %d", len(payload), MaxFrameBytes)
	}
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(append(hdr[:], payload...)); err != nil {
		return fmt.Errorf("exec frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame. buf is reused when large enough. It returns
// io.EOF at a clean end of stream, an error for a frame over
// MaxFrameBytes or a truncated one.
func ReadFrame(r io.Reader, buf []byte) (typ byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return 0, nil, fmt.Errorf("exec frame: truncated header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrameBytes {
		return 0, nil, fmt.Errorf("exec frame: %d bytes, at most %d", n, MaxFrameBytes)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			// No byte of the payload came: still a truncated frame, not
			// the clean end of the stream that io.EOF means.
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("exec frame: truncated payload: %w", err)
	}
	return hdr[0], buf, nil
}
