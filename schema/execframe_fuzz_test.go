package schema

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame: reading a stream of exec frames never panics, never
// returns a payload over MaxFrameBytes, and every frame it returns is
// exactly the bytes it consumed: WriteFrame of the frames read rebuilds
// the stream up to where reading stopped. A stream that ends between
// frames ends with io.EOF; one cut inside a frame is an error.
func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	for _, fr := range []struct {
		typ     byte
		payload string
	}{{FrameStdin, "ls\n"}, {FrameResize, `{"cols":80,"rows":24}`}, {FrameStdinEOF, ""}, {FrameStdout, "x"}, {FrameExit, `{"exitCode":0}`}} {
		if err := WriteFrame(&b, fr.typ, []byte(fr.payload)); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(b.Bytes())
	f.Add([]byte{FrameStdout, 0, 0, 0, 3, 'a'})
	f.Add([]byte{FrameStdout, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{FrameStdout, 0, 1, 0, 0})
	f.Add([]byte{FrameStdin, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var rebuilt bytes.Buffer
		var buf []byte
		for {
			typ, payload, err := ReadFrame(r, buf)
			consumed := len(data) - r.Len()
			if err != nil {
				if err == io.EOF && rebuilt.Len() != consumed {
					t.Fatalf("io.EOF in the middle of a frame, after %d bytes", consumed)
				}
				if err != io.EOF && errors.Is(err, io.EOF) {
					t.Fatalf("a truncated frame wraps io.EOF: %v", err)
				}
				if !bytes.Equal(rebuilt.Bytes(), data[:rebuilt.Len()]) {
					t.Fatal("the frames read do not rebuild the stream")
				}
				return
			}
			if len(payload) > MaxFrameBytes {
				t.Fatalf("frame of %d bytes", len(payload))
			}
			if err := WriteFrame(&rebuilt, typ, payload); err != nil {
				t.Fatalf("WriteFrame of a frame read: %v", err)
			}
			if rebuilt.Len() != consumed || !bytes.Equal(rebuilt.Bytes(), data[:consumed]) {
				t.Fatalf("frame type %d of %d bytes: rebuilt %d bytes, consumed %d", typ, len(payload), rebuilt.Len(), consumed)
			}
			buf = payload
		}
	})
}
