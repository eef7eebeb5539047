// Package linediff computes line diffs (longest common subsequence) and
// prints them in unified format: the text of `fleet diff`, which
// manifest.Diff renders. It knows nothing of Fleet objects: a pure
// function of two texts, tested on its own.
package linediff

import (
	"fmt"
	"strings"
)

// Op is one line of an edit script.
type Op struct {
	// Kind is ' ' (in both), '-' (only in a) or '+' (only in b).
	Kind byte
	Line string
}

// maxCells bounds the LCS table; past it the differing middle of the two
// texts is reported as removed and added wholesale.
const maxCells = 16 << 20

// Lines returns an edit script turning a into b with as few removed and
// added lines as possible. Removals come before additions within a change.
func Lines(a, b []string) []Op {
	// Trim the common prefix and suffix: most diffs of manifests touch a
	// few lines, and this keeps the table small.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]Op, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		ops = append(ops, Op{' ', l})
	}
	ops = append(ops, lcs(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, Op{' ', l})
	}
	return ops
}

func lcs(a, b []string) []Op {
	n, m := len(a), len(b)
	var ops []Op
	if n == 0 || m == 0 || n*m > maxCells {
		for _, l := range a {
			ops = append(ops, Op{'-', l})
		}
		for _, l := range b {
			ops = append(ops, Op{'+', l})
		}
		return ops
	}
	// t[i][j] is the LCS length of a[i:] and b[j:].
	t := make([][]int32, n+1)
	for i := range t {
		t[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, Op{' ', a[i]})
			i++
			j++
		case t[i+1][j] >= t[i][j+1]:
			ops = append(ops, Op{'-', a[i]})
			i++
		default:
			ops = append(ops, Op{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, Op{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, Op{'+', b[j]})
	}
	return ops
}

// SplitLines splits text into lines without their newlines; a final newline
// does not start another line.
func SplitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// Unified returns the unified diff of texts a and b with context lines of
// context around each change, under "--- fromName" and "+++ toName"
// headers; "" when they are equal.
func Unified(fromName, toName, a, b string, context int) string {
	ops := Lines(SplitLines(a), SplitLines(b))
	var changes []int
	for i, op := range ops {
		if op.Kind != ' ' {
			changes = append(changes, i)
		}
	}
	if len(changes) == 0 {
		return ""
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", fromName, toName)
	// Group changes whose context overlaps or touches into hunks.
	for k := 0; k < len(changes); {
		start := max(changes[k]-context, 0)
		end := changes[k]
		for k < len(changes) && changes[k] <= end+2*context+1 {
			end = changes[k]
			k++
		}
		end = min(end+context+1, len(ops))
		writeHunk(&out, ops, start, end)
	}
	return out.String()
}

// writeHunk writes ops[start:end] with its @@ header. Line numbers are
// counted from the top of ops.
func writeHunk(out *strings.Builder, ops []Op, start, end int) {
	aLine, bLine := 1, 1
	for _, op := range ops[:start] {
		if op.Kind != '+' {
			aLine++
		}
		if op.Kind != '-' {
			bLine++
		}
	}
	aLen, bLen := 0, 0
	for _, op := range ops[start:end] {
		if op.Kind != '+' {
			aLen++
		}
		if op.Kind != '-' {
			bLen++
		}
	}
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(aLine, aLen), hunkRange(bLine, bLen))
	for _, op := range ops[start:end] {
		out.WriteByte(op.Kind)
		out.WriteString(op.Line)
		out.WriteByte('\n')
	}
}

// hunkRange formats a hunk range as GNU diff does: "l,n", "l" for one line,
// and the line before for an empty range.
func hunkRange(line, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", line-1)
	case 1:
		return fmt.Sprintf("%d", line)
	}
	return fmt.Sprintf("%d,%d", line, n)
}
