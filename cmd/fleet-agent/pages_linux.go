package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4): reclaim the pages of a range
// now. The kernel skips pages other processes map too.
const madvPageout = 21

// releaseBinaryPages hands back to the kernel the resident pages of this
// process's own executable that are read-only (code and constant data),
// and returns how many bytes of mappings it advised.
//
// Start-up reads much of the binary once: package initialisation, the
// containerd and gRPC clients being set up, the state load, the first
// reconcile. Those pages are clean and the kernel would drop them under
// memory pressure anyway, but until then they count in the agent's RSS and
// in a memory-limited cgroup's charge: 15.6 MiB of the 23 MiB an idle
// agent with 5 pods held (BENCHMARKS.md, "Devices: agent footprint").
// Released once start-up is over, only what the agent goes on using comes
// back, read from the page cache or the file. Android reclaims the pages
// of background apps with the same advice.
func releaseBinaryPages() (int64, error) {
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return 0, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	var advised int64
	for line := range bytes.Lines(maps) {
		start, end, ok := binaryMapping(line, exe.Ino)
		if !ok {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPageout); errno != 0 {
			return advised, fmt.Errorf("madvise(MADV_PAGEOUT): %w", errno)
		}
		advised += int64(end - start)
	}
	return advised, nil
}

// binaryMapping parses one line of /proc/self/maps ("start-end perms
// offset dev inode path") and reports the range of a read-only mapping of
// the file with inode ino.
func binaryMapping(line []byte, ino uint64) (start, end uintptr, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 6 || len(f[1]) < 2 || f[1][0] != 'r' || f[1][1] != '-' {
		return 0, 0, false
	}
	if n, err := strconv.ParseUint(string(f[4]), 10, 64); err != nil || n != ino || n == 0 {
		return 0, 0, false
	}
	lo, hi, found := bytes.Cut(f[0], []byte("-"))
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(lo), 16, 64)
	e, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}
