package runtime

import (
	"errors"
	"sync"
)

// Exec runs a command in a running container, as a second process
// beside its main one: the process takes the container's own user,
// groups, capabilities, environment and working directory, so a probe or
// an operator's command sees what the workload sees. Exec returns the
// command's exit code and its output (stdout and stderr interleaved as
// written, at most ExecOutputMax bytes: the rest is discarded).
//
// err is set when the command could not be run or did not finish: an
// unknown container (ErrNotFound), one whose task is not running
// (ErrNotRunning), a command that cannot be started (no such file, say),
// or a command still running after timeout (err wraps
// context.DeadlineExceeded; the process is killed). A command that ran
// and exited with a non-zero code is not an error. A timeout ≤ 0 means
// no limit but ctx's.

// ErrNotRunning is wrapped by Exec's error when the container exists but
// its task does not run.
var ErrNotRunning = errors.New("not running")

// ExecOutputMax bounds the output Exec returns: 64 KiB.
const ExecOutputMax = 64 << 10

// BoundedBuffer keeps the first Max bytes written to it and discards the
// rest, without failing the writer (a command blocked on a full pipe
// would never exit). It is safe for concurrent writers: stdout and
// stderr are copied into one buffer.
type BoundedBuffer struct {
	Max int

	mu        sync.Mutex
	buf       []byte
	truncated bool
}

// Write implements io.Writer; it always reports len(p) written.
func (b *BoundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.Max - len(b.buf)
	if room < len(p) {
		b.truncated = true
	}
	if room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what was kept.
func (b *BoundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

// Truncated reports whether bytes were discarded.
func (b *BoundedBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.truncated
}
