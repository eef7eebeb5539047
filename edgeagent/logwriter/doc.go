// Package logwriter writes a container's stdout and stderr to its log
// file and rotates that file by size as it writes, so that the log's
// files never hold more than MaxBytes × (MaxFiles + 1) bytes, at any
// moment (Options.Bound).
//
// It runs as "fleet-agent log-writer", the logging program containerd's
// shim starts for each task (a binary:// log URI, see Shim): the shim,
// not the agent, is the task's parent, so a task keeps logging, within
// its bounds, while the agent is down or restarting. The writer is the
// only one to write the files, so rotation is a rename (PATH → PATH.1 →
// … → PATH.N), never a copy, and no line is lost to it.
//
// Order: stdout and stderr reach the writer through two pipes (the shim
// makes them; the task writes to them directly), read by one goroutine
// each. Within a stream the order is kept; across the two it is the
// order in which the reads complete, so lines a program writes to stdout
// and stderr close together may swap: no reader of two pipes can tell
// which write came first, and containerd's shim offers no single pipe
// (only a TTY merges the streams). Measured (the containerd runtime's
// TestLogOrderOfInterleavedStreams, shim 1.6.20): of 4000 lines written
// alternately to stdout and stderr, 1 to 3 landed before one written
// earlier (5 to 17 with the shim writing the file itself); a stderr line
// written right after a burst on stdout can land before the burst's end.
// A write is never split by the other stream unless it is over 32 KiB
// (one read).
//
// Cost: one process per running container; as "fleet-agent log-writer",
// about 4 MiB of anonymous memory (the Go runtime and the agent's package
// initialisation), idle or writing 7 MiB/s, once its start-up heap is
// given back. A second after it starts it also hands back the binary's
// pages its start-up read (unmapped even where the agent or another
// writer maps them too): idle, its RSS is 5 to 6 MiB, of which 1.3 to
// 1.9 MiB of the binary (BENCHMARKS.md, "The real agent on containerd,
// three pods"; 16 MiB before, nearly the same 12 MiB of the binary as the
// agent's).
package logwriter
