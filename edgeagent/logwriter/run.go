package logwriter

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Grace is how long Run goes on copying once its context is done (the
// shim sends SIGTERM when the task is deleted): long enough to read what
// the pipes still hold, short of the shim's 12 s before SIGKILL.
const Grace = 2 * time.Second

// bufSize is what one read takes from a stream: the "chunk".
const bufSize = 32 << 10

// Shim runs the writer as containerd's shim starts a binary:// logging
// program (pkg/process/io.go NewBinaryIO, containerd 1.6 and 1.7): the
// task's stdout is fd 3, its stderr fd 4, and closing fd 5 tells the
// shim the log is ready, after which it starts the task.
func Shim(ctx context.Context, o Options) error {
	stdout, stderr, ready := os.NewFile(3, "stdout"), os.NewFile(4, "stderr"), os.NewFile(5, "ready")
	for _, f := range []*os.File{stdout, stderr, ready} {
		if _, err := f.Stat(); err != nil {
			return fmt.Errorf("log writer: fds 3, 4 and 5 must be open, as containerd's shim leaves them: %w", err)
		}
	}
	return Run(ctx, o, []io.Reader{stdout, stderr}, ready.Close)
}

// Run copies every stream into the log until all of them reach end of
// file, then closes the log. It calls ready once the log is open, or
// could not be: Run then reads and drops, so that the program is never
// blocked by its log, and tries the file again once a second. Once ctx
// is done Run goes on for at most Grace. Only bad options are an error.
func Run(ctx context.Context, o Options, streams []io.Reader, ready func() error) error {
	o.ensureDefaults()
	if err := o.check(); err != nil {
		if ready != nil {
			ready()
		}
		return err
	}
	w := newWriter(o)
	if ready != nil {
		if err := ready(); err != nil {
			w.Close()
			return fmt.Errorf("log writer: signal ready: %w", err)
		}
	}
	var wg sync.WaitGroup
	for _, r := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			copyStream(w, r)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t := time.NewTimer(Grace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	return w.Close()
}

// copyStream writes each read of r to w until r ends.
func copyStream(w *Writer, r io.Reader) {
	buf := make([]byte, bufSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n]) // never fails
		}
		if err != nil {
			return
		}
	}
}

// Main is the log writer as the shim runs it, "PROGRAM log-writer SPEC",
// where SPEC is what Options.Encode returns (the runtime's binary:// URI
// has that one query key). It returns once the task's output has ended.
func Main(ctx context.Context, spec string) error {
	o, err := Decode(spec)
	if err != nil {
		return err
	}
	return Shim(ctx, o)
}
