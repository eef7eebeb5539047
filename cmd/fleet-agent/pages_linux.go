package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
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
// Three pieces of advice, in this order:
//   - MADV_RANDOM: from now on a fault reads the one page it needs, not
//     the 128 KiB or more around it (read-ahead). The kernel also maps,
//     on each fault, every page of the 64 KiB around it that is in the
//     page cache (fault-around): so what this process no longer maps
//     must leave the cache too, or its RSS grows back by 64 KiB a touch.
//   - MADV_PAGEOUT reclaims the pages only this process maps: they leave
//     the page cache.
//   - MADV_DONTNEED unmaps the rest, the pages other processes map too
//     (MADV_PAGEOUT skips them): every container's log writer ("fleet-agent
//     log-writer") maps the same binary and touched nearly the same 12 MiB
//     in its own start-up. They stay in the page cache for the others,
//     but no longer count in this process's RSS.
func releaseBinaryPages() (int64, error) {
	maps, err := binaryMappings()
	if err != nil {
		return 0, err
	}
	var advised int64
	for _, m := range maps {
		for _, advice := range []uintptr{syscall.MADV_RANDOM, madvPageout} {
			if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, advice); errno != 0 {
				return advised, fmt.Errorf("madvise(%d): %w", advice, errno)
			}
		}
		advised += int64(m.end - m.start)
	}
	if _, err = dropMappings(maps); err != nil {
		return advised, err
	}
	return advised, evictBinary()
}

// evictBinary drops from the page cache the pages of this process's
// executable that no process maps any more (POSIX_FADV_DONTNEED skips
// mapped ones): what the log writers' start-up read, and what this
// process just unmapped. Left cached, the kernel maps them back on the
// next touch nearby (fault-around, and ext4's large folios: a resync grew
// the agent's RSS by 4.6 MiB), and this process's RSS grows back to most
// of the binary. A log writer starting later reads its start-up pages
// from the file again.
func evictBinary() error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("open /proc/self/exe: %w", err)
	}
	defer f.Close()
	// x/sys/unix: 32-bit ARM's fadvise64_64 takes its arguments in
	// another order than amd64's and arm64's fadvise64.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise(POSIX_FADV_DONTNEED): %w", err)
	}
	return nil
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
