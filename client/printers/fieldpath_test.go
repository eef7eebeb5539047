package printers

import (
	"strings"
	"testing"
)

// TestParseFieldPath: the paths --for=jsonpath takes (those of the parser
// wait had of its own), and the ones it refuses, in its words.
func TestParseFieldPath(t *testing.T) {
	obj := map[string]any{
		"status": map[string]any{
			"online": true,
			"pods":   []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}, map[string]any{"name": "c", "ready": false}},
		},
		"metadata": map[string]any{
			"generation": 4,
			"labels":     map[string]any{"example.com/tier": "web"},
			"unset":      nil,
		},
	}
	for _, tc := range []struct {
		expr string
		want string // "" for not set
	}{
		{".status.online", "true"},
		{".status.pods[2].ready", "false"},
		{".status.pods[2].name", "c"},
		{`.metadata.labels.example\.com/tier`, "web"},
		{".metadata.generation", "4"},
		{".metadata.labels", `{"example.com/tier":"web"}`},
		{".status.pods[1]", `{"name":"b"}`},
		{".metadata.unset", ""},
		{".metadata.missing", ""},
		{".status.pods[9].name", ""},
		{".status.online.x", ""},
		{".status.pods.name", ""},
		{".metadata[0]", ""},
	} {
		p, err := ParseFieldPath(tc.expr)
		if err != nil {
			t.Errorf("ParseFieldPath(%q): %v", tc.expr, err)
			continue
		}
		got, set := p.Lookup(obj)
		if set != (tc.want != "") || got != tc.want {
			t.Errorf("%s: Lookup = %q, %v; want %q", tc.expr, got, set, tc.want)
		}
	}
	for _, tc := range []struct{ expr, want string }{
		{"", "the path is empty"},
		{".", "a field name is empty"},
		{"status", "want dotted field names"},
		{"$.status", "want dotted field names"},
		{".a..b", "a field name is empty"},
		{".a[", "no ] closes the index"},
		{".a[-1]", "an index is a number"},
		{".a[x]", "an index is a number"},
		{".a[1:2]", "an index is a number"},
		{".a[*]", "an index is a number"},
		{".a[0,1]", "want dotted field names"},
		{".a.*", "want dotted field names"},
		{".a[?(@.b==1)]", "want dotted field names"},
	} {
		if p, err := ParseFieldPath(tc.expr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFieldPath(%q) = %v, %v; want an error saying %q", tc.expr, p, err, tc.want)
		}
	}
}
