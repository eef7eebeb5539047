package linediff

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"both empty", "", "", ""},
		{"all added", "", "a\nb\n", `--- old
+++ new
@@ -0,0 +1,2 @@
+a
+b
`},
		{"all removed", "a\n", "", `--- old
+++ new
@@ -1 +0,0 @@
-a
`},
		{"one changed line with context", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nFIVE\n6\n7\n8\n9\n", `--- old
+++ new
@@ -2,7 +2,7 @@
 2
 3
 4
-5
+FIVE
 6
 7
 8
`},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "ONE\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\nTWELVE\n", `--- old
+++ new
@@ -1,4 +1,4 @@
-1
+ONE
 2
 3
 4
@@ -9,4 +9,4 @@
 9
 10
 11
-12
+TWELVE
`},
		{"close changes share a hunk", "1\n2\n3\n4\n5\n6\n7\n8\n", "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n", `--- old
+++ new
@@ -1,8 +1,8 @@
-1
+ONE
 2
 3
 4
 5
 6
 7
-8
+EIGHT
`},
		{"insertion", "a\nc\n", "a\nb\nc\n", `--- old
+++ new
@@ -1,2 +1,3 @@
 a
+b
 c
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Unified("old", "new", tt.a, tt.b, 3)
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestLinesIsMinimalAndApplies checks on random inputs that the script
// turns a into b and keeps a longest common subsequence.
func TestLinesIsMinimalAndApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := func() []string {
		n := r.IntN(12)
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprint(r.IntN(4))
		}
		return out
	}
	for range 2000 {
		a, b := gen(), gen()
		ops := Lines(a, b)
		var gotA, gotB []string
		common := 0
		for _, op := range ops {
			if op.Kind != '+' {
				gotA = append(gotA, op.Line)
			}
			if op.Kind != '-' {
				gotB = append(gotB, op.Line)
			}
			if op.Kind == ' ' {
				common++
			}
		}
		if strings.Join(gotA, ",") != strings.Join(a, ",") || strings.Join(gotB, ",") != strings.Join(b, ",") {
			t.Fatalf("script of %v -> %v does not reproduce them: %v", a, b, ops)
		}
		if want := lcsLen(a, b); common != want {
			t.Fatalf("%v -> %v: %d common lines, LCS is %d", a, b, common, want)
		}
	}
}

func lcsLen(a, b []string) int {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	if a[0] == b[0] {
		return 1 + lcsLen(a[1:], b[1:])
	}
	return max(lcsLen(a[1:], b), lcsLen(a, b[1:]))
}

func TestHugeInputFallsBack(t *testing.T) {
	a := make([]string, 5000)
	b := make([]string, 5000)
	for i := range a {
		a[i], b[i] = fmt.Sprint("a", i), fmt.Sprint("b", i)
	}
	ops := Lines(a, b)
	if len(ops) != 10000 {
		t.Fatalf("%d ops", len(ops))
	}
}
