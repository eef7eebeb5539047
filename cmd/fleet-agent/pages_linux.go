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
//
// MADV_PAGEOUT reclaims only the pages no other process maps, and every
// container's log writer ("fleet-agent log-writer") maps the same binary
// and touched nearly the same 12 MiB of it in its own start-up. So the
// pages still mapped afterwards are unmapped from this process
// (dropBinaryPages): they stay in the page cache, for the writers and as
// cache, but no longer count in this process's RSS.
func releaseBinaryPages() (int64, error) {
	maps, err := binaryMappings()
	if err != nil {
		return 0, err
	}
	var advised int64
	for _, m := range maps {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, madvPageout); errno != 0 {
			return advised, fmt.Errorf("madvise(MADV_PAGEOUT): %w", errno)
		}
		advised += int64(m.end - m.start)
	}
	_, err = dropMappings(maps)
	return advised, err
}

// dropBinaryPages unmaps from this process the resident pages of its own
// executable's read-only mappings, and returns how many bytes of mappings
// it advised. Unlike releaseBinaryPages it reads nothing back from disk
// later: the pages stay in the page cache (reclaimable, as any clean
// cache), and what the agent touches again is mapped back by a minor
// fault. It is what the agent does after each burst of work, when the
// burst's code (creating tasks, pulling, the log writers' set-up) is done.
func dropBinaryPages() (int64, error) {
	maps, err := binaryMappings()
	if err != nil {
		return 0, err
	}
	return dropMappings(maps)
}

// dropMappings applies MADV_DONTNEED to each mapping. On a private file
// mapping that drops the process's page table entries and, with them,
// any anonymous copy of a page: a mapping holding such copies (a page a
// debugger patched, relocations of a position-independent build) is left
// alone, so that nothing this process wrote is lost.
func dropMappings(maps []binaryRange) (int64, error) {
	var advised int64
	for _, m := range maps {
		if m.anonymous {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); errno != 0 {
			return advised, fmt.Errorf("madvise(MADV_DONTNEED): %w", errno)
		}
		advised += int64(m.end - m.start)
	}
	return advised, nil
}

// binaryRange is one read-only mapping of the executable; anonymous
// reports whether any of its pages is a private copy (smaps' Anonymous).
type binaryRange struct {
	start, end uintptr
	anonymous  bool
}

// binaryMappings lists the read-only mappings of this process's own
// executable, from /proc/self/smaps.
func binaryMappings() ([]binaryRange, error) {
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return nil, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("read smaps: %w", err)
	}
	return parseSmaps(smaps, exe.Ino), nil
}

// parseSmaps returns the read-only mappings of the file with inode ino
// in an smaps text: a header line per mapping (as in /proc/PID/maps),
// then "Field: value kB" lines about it.
func parseSmaps(smaps []byte, ino uint64) []binaryRange {
	var maps []binaryRange
	in := false // the fields that follow are of a mapping kept in maps
	for line := range bytes.Lines(smaps) {
		if v, ok := bytes.CutPrefix(line, []byte("Anonymous:")); ok {
			if in && !bytes.Equal(bytes.TrimSpace(v), []byte("0 kB")) {
				maps[len(maps)-1].anonymous = true
			}
			continue
		}
		if !isMappingHeader(line) {
			continue
		}
		start, end, ok := binaryMapping(line, ino)
		if in = ok; ok {
			maps = append(maps, binaryRange{start: start, end: end})
		}
	}
	return maps
}

// isMappingHeader tells an smaps header ("7f00-7f10 r--p …") from a
// field line ("Rss: 4 kB", "VmFlags: rd mr"): only a header's first word
// holds a '-', and no field name does.
func isMappingHeader(line []byte) bool {
	first, _, _ := bytes.Cut(line, []byte(" "))
	return bytes.IndexByte(first, '-') > 0 && !bytes.HasSuffix(first, []byte(":"))
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

// residentBytes is this process's resident set (VmRSS), from
// /proc/self/statm: its second field, in pages.
func residentBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("read statm: %w", err)
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("statm %q: no resident field", b)
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("statm %q: %w", b, err)
	}
	return pages * int64(os.Getpagesize()), nil
}
