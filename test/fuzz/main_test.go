package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDeadlineRace: the CI log of the Go race is run again; a finding, a
// panic or any other failure is not.
func TestDeadlineRace(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		race      bool
	}{
		{"the race, as CI printed it", `fuzz: elapsed: 0s, gathering baseline coverage: 6/6 completed, now fuzzing with 2 workers
fuzz: elapsed: 2s, execs: 51979 (25215/sec), new interesting: 6 (total: 12)
--- FAIL: FuzzReadFrame (2.06s)
    context deadline exceeded
FAIL
`, true},
		{"a finding", `fuzz: elapsed: 1s, execs: 1200 (1200/sec), new interesting: 3 (total: 9)
--- FAIL: FuzzReadFrame (1.20s)
    --- FAIL: FuzzReadFrame (0.00s)
        frame_test.go:40: frame cut after its header read as io.EOF

    Failing input written to testdata/fuzz/FuzzReadFrame/8d3c1a
    To re-run:
    go test -run=FuzzReadFrame/8d3c1a
FAIL
`, false},
		{"a panic that mentions a deadline", `--- FAIL: FuzzHandle (0.31s)
    context deadline exceeded
panic: runtime error: index out of range [3] with length 3
FAIL
`, false},
		{"another failure", `--- FAIL: FuzzDecode (0.02s)
    decode_test.go:12: seed corpus: got 3, want 2
FAIL
`, false},
	} {
		if got := deadlineRace([]byte(tc.out)); got != tc.race {
			t.Errorf("%s: deadlineRace = %v, want %v", tc.name, got, tc.race)
		}
	}
}

// TestParseFlagsAndMatching: -run picks targets by name or package
// directory; the defaults are those the Makefile relies on.
func TestParseFlagsAndMatching(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.fuzztime != 3*time.Second || o.minimize != time.Second || o.list || o.verbose {
		t.Fatalf("defaults = %+v, %v", o, err)
	}
	if _, err := parseFlags([]string{"-run", "("}, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "-run: ") {
		t.Errorf("bad -run = %v", err)
	}
	o, err = parseFlags([]string{"-run", "Selector|^broker$", "-fuzztime", "2s", "-list"}, io.Discard)
	if err != nil || o.fuzztime != 2*time.Second || !o.list {
		t.Fatalf("flags = %+v, %v", o, err)
	}
	all := []target{{"broker", "FuzzAllowed"}, {"schema", "FuzzSelector"}, {"schema", "FuzzQuantity"}, {"schema/selector", "FuzzParse"}}
	got := matching(all, o.match)
	if want := []target{all[0], all[1]}; !slices.Equal(got, want) {
		t.Errorf("matching = %v, want %v", got, want)
	}
}
