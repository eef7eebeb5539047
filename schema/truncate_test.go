package schema

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s      string
		max    int
		marker string
		want   string
	}{
		{"", 5, "...", ""},
		{"hello", 5, "...", "hello"},
		{"hello!", 5, "...", "hello..."},
		{"hello!", 5, "…", "hello…"},
		{"hello", 0, "...", "hello"[:0] + "..."},
		// é is 2 bytes: a cut at byte 2 would split it.
		{"aébc", 2, "...", "a..."},
		{"aébc", 3, "...", "aé..."},
		// 世 is 3 bytes.
		{"世界", 4, "...", "世..."},
		{"世界", 5, "...", "世..."},
		{"世界", 6, "...", "世界"},
		// Not UTF-8: cut at max.
		{"ab\x80\x80\x80\x80\x80", 5, "...", "ab\x80\x80\x80..."},
	} {
		if got := Truncate(tc.s, tc.max, tc.marker); got != tc.want {
			t.Errorf("Truncate(%q, %d, %q) = %q, want %q", tc.s, tc.max, tc.marker, got, tc.want)
		}
	}
	// The callers' limits: the bytes before the marker never exceed max,
	// and the result is valid UTF-8 when s is.
	long := strings.Repeat("€", 200)
	for _, max := range []int{64, 80, 200, 512} {
		got := strings.TrimSuffix(Truncate(long, max, "..."), "...")
		if len(got) > max || len(got) < max-utf8.UTFMax+1 || !utf8.ValidString(got) {
			t.Errorf("Truncate(%d × €, %d) kept %d bytes, valid %v", 200, max, len(got), utf8.ValidString(got))
		}
	}
}
