package main

// Verbs that exercise container logs (issue 40):
//
//	flood MIB DURATION   write MIB MiB to stdout in 100-byte numbered lines
//	                     ("flood 00000042 xxx…"), in 64 KiB writes spread
//	                     evenly over DURATION, then print "flood done"
//	interleave N         print "seq I out" to stdout and "seq I err" to
//	                     stderr, alternately, for I from 0 to N-1: one
//	                     write each, in the order of the numbers

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// logVerbs maps each verb to its number of arguments and its function,
// in the shape of run's actions: (exit code, whether to exit now).
var logVerbs = map[string]struct {
	args int
	run  func(args []string) (int, bool)
}{
	"flood":      {2, flood},
	"interleave": {1, interleave},
}

// runLogVerb runs a verb of logVerbs on the script that follows it and
// returns the rest of the script; it exits the program on a bad
// argument or when the verb asks to.
func runLogVerb(verb string, script []string) []string {
	v := logVerbs[verb]
	if len(script) < v.args {
		fmt.Fprintf(os.Stderr, "app: %s needs an argument\n", verb)
		os.Exit(2)
	}
	if code, exit := v.run(script[:v.args]); exit {
		os.Exit(code)
	}
	return script[v.args:]
}

const floodLine = 100

func flood(a []string) (int, bool) {
	mib, err := strconv.Atoi(a[0])
	if err != nil || mib < 0 {
		fmt.Fprintln(os.Stderr, "app: flood: bad size", a[0])
		return 2, true
	}
	d, err := time.ParseDuration(a[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "app: flood:", err)
		return 2, true
	}
	const perWrite = 64 << 10 / floodLine // lines in one write
	lines := mib << 20 / floodLine
	writes := (lines + perWrite - 1) / perWrite
	buf := make([]byte, 0, perWrite*floodLine)
	start := time.Now()
	for w, n := 0, 0; n < lines; w++ {
		buf = buf[:0]
		for i := 0; i < perWrite && n < lines; i, n = i+1, n+1 {
			buf = fmt.Appendf(buf, "flood %08d ", n)
			for len(buf)%floodLine != floodLine-1 {
				buf = append(buf, 'x')
			}
			buf = append(buf, '\n')
		}
		if _, err := os.Stdout.Write(buf); err != nil {
			return 13, true
		}
		// Pace: write w+1 is due at (w+1)/writes of d.
		if due := start.Add(d * time.Duration(w+1) / time.Duration(writes)); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
	}
	fmt.Println("flood done")
	return 0, false
}

func interleave(a []string) (int, bool) {
	n, err := strconv.Atoi(a[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "app: interleave:", err)
		return 2, true
	}
	for i := 0; i < n; i++ {
		fmt.Fprintf(os.Stdout, "seq %d out\n", i)
		fmt.Fprintf(os.Stderr, "seq %d err\n", i)
	}
	return 0, false
}
