package runtime

import (
	"io"
	"time"
)

// TermSize is a terminal's size in characters.
type TermSize struct {
	Cols, Rows uint16
}

// ExecStreamOptions describe a command ExecStream runs in a container:
// an operator's `fleet exec`, interactive or not.
//
// ExecStream returns the command's exit code once it has exited and its
// output has been written (a background child that keeps the output open
// is given a short grace, then cut off). err is set when the command
// could not be run: an unknown container (ErrNotFound), one whose task
// does not run (ErrNotRunning), a command that cannot be started; or when
// ctx ended first, in which case the process is killed and err wraps
// ctx's error. A command that exited with a non-zero code is not an
// error.
type ExecStreamOptions struct {
	// Cmd is the command and its arguments. Required.
	Cmd []string
	// TTY runs the command with a pseudo-terminal: its output (stdout and
	// stderr merged) goes to Stdout, and Resize applies.
	TTY bool
	// Stdin is the process's input; nil gives it none (it reads end of
	// file). The process's input is closed when Stdin returns io.EOF.
	Stdin io.Reader
	// Stdout and Stderr receive the output (nil: discarded). Writes may
	// block: the process then blocks on its full pipe. With TTY, Stderr
	// is not used.
	Stdout, Stderr io.Writer
	// Size is the terminal's initial size (TTY only; nil: the runtime's
	// default).
	Size *TermSize
	// Resize carries new terminal sizes while the command runs (TTY
	// only; nil: none).
	Resize <-chan TermSize
	// Started, if set, is called once the process has started, before
	// any output is written.
	Started func()
}

// ContainerStats are one running container's figures, from its cgroup.
type ContainerStats struct {
	// Time is when they were read.
	Time time.Time
	// CPUUsageNanos is the CPU time the container used since it started.
	CPUUsageNanos uint64
	// MemoryBytes is the memory in use (cgroup v2 memory.current, v1
	// memory.usage_in_bytes); MemoryWorkingSetBytes that minus the
	// inactive file pages (what kubectl top shows); MemoryLimitBytes
	// the limit (0: none).
	MemoryBytes, MemoryWorkingSetBytes, MemoryLimitBytes uint64
	// PIDs is the number of processes.
	PIDs uint64
}
