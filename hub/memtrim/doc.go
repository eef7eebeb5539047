// Package memtrim gives back to the OS the heap a burst left behind
// (a reconnect storm, a fleet-wide rollout): Run checks every interval
// and forces one collection and scavenge (debug.FreeOSMemory) only when
// no collection ran since the last check and the heap held beyond the
// live one is at least 64 MiB and half the live heap. While the process is
// busy it forces nothing. It reads the runtime's metrics only, so it is a
// leaf any long-running Fleet process may use; the hub runs it every
// DefaultInterval unless Options.MemoryTrimInterval turns it off.
package memtrim
