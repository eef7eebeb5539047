package schema

import "unicode/utf8"

// Truncate shortens s for a message: a string longer than max bytes is cut
// to at most max bytes, never inside a UTF-8 sequence, and marker ("...",
// say) is appended. A string of at most max bytes is returned as is.
func Truncate(s string, max int, marker string) string {
	if len(s) <= max {
		return s
	}
	cut := max
	// Back up to the start of the rune the cut would split; a string
	// that is not UTF-8 is cut where it is (at most 3 bytes back).
	for i := cut; i > 0 && i > max-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			cut = i
			break
		}
	}
	return s[:cut] + marker
}

// truncate shortens a value quoted in a validation message.
func truncate(s string) string { return Truncate(s, 80, "...") }
