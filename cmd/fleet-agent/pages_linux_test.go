package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestBinaryMapping(t *testing.T) {
	const ino = 1234567
	for _, c := range []struct {
		line       string
		start, end uintptr
		ok         bool
	}{
		{"00400000-00bf4000 r-xp 00000000 fd:01 1234567 /usr/local/bin/fleet-agent\n", 0x400000, 0xbf4000, true},
		{"00bf4000-01545000 r--p 007f4000 fd:01 1234567 /usr/local/bin/fleet-agent (deleted)\n", 0xbf4000, 0x1545000, true},
		{"01545000-015d2000 rw-p 01145000 fd:01 1234567 /usr/local/bin/fleet-agent\n", 0, 0, false}, // writable: data
		{"00400000-00bf4000 r-xp 00000000 fd:01 7654321 /usr/lib/other.so\n", 0, 0, false},          // another file
		{"7ffd1000-7ffd3000 r--p 00000000 00:00 0 [vvar]\n", 0, 0, false},
		{"c000000000-c000400000 rw-p 00000000 00:00 0\n", 0, 0, false},
		{"garbage\n", 0, 0, false},
		{"zz-00bf4000 r-xp 00000000 fd:01 1234567 /x\n", 0, 0, false},
		{"00bf4000-00400000 r-xp 00000000 fd:01 1234567 /x\n", 0, 0, false},
	} {
		start, end, ok := binaryMapping([]byte(c.line), ino)
		if ok != c.ok || start != c.start || end != c.end {
			t.Errorf("%q: %#x-%#x %v, want %#x-%#x %v", c.line, start, end, ok, c.start, c.end, c.ok)
		}
	}
}

// TestReleaseBinaryPages: the test binary, mapped by this process alone,
// holds fewer resident file pages once released.
func TestReleaseBinaryPages(t *testing.T) {
	before := rssFile(t)
	n, err := releaseBinaryPages()
	if errors.Is(err, syscall.EINVAL) {
		t.Fatalf("%v: this kernel has no MADV_PAGEOUT (Linux < 5.4); the agent runs but cannot release its pages", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	t.Logf("advised %d KiB of mappings; RssFile %d -> %d KiB", n>>10, before>>10, after>>10)
	if n <= 0 {
		t.Fatal("no mapping of the binary found in /proc/self/maps")
	}
	if after >= before {
		t.Errorf("RssFile %d KiB after the release, %d KiB before: nothing was released", after>>10, before>>10)
	}
	if rss, err := residentBytes(); err != nil || rss < after {
		t.Errorf("residentBytes() = %d, %v; want at least RssFile, %d", rss, err, after)
	}
}

func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestParseSmaps: the read-only mappings of the binary, each with whether
// it holds private (anonymous) copies, and nothing else.
func TestParseSmaps(t *testing.T) {
	const smaps = `00400000-00b72000 r-xp 00000000 fd:01 1234567 /usr/local/bin/fleet-agent
Size:               7624 kB
Rss:                4220 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
00b72000-013b3000 r--p 00772000 fd:01 1234567 /usr/local/bin/fleet-agent
Rss:                5344 kB
Anonymous:             8 kB
013b3000-01437000 rw-p 00fb3000 fd:01 1234567 /usr/local/bin/fleet-agent
Anonymous:           140 kB
7fb66ffe0000-7fb670300000 rw-p 00000000 00:00 0 
Anonymous:          1388 kB
7fb6b6e5e000-7fb6b6e60000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
`
	got := parseSmaps([]byte(smaps), 1234567)
	want := []binaryRange{{0x400000, 0xb72000, false}, {0xb72000, 0x13b3000, true}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
