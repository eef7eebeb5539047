package selector

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetmq/fleet/schema"
)

func TestParse(t *testing.T) {
	in := func(k string, v ...string) schema.LabelSelectorRequirement {
		return schema.LabelSelectorRequirement{Key: k, Operator: schema.LabelSelectorOpIn, Values: v}
	}
	notIn := func(k string, v ...string) schema.LabelSelectorRequirement {
		return schema.LabelSelectorRequirement{Key: k, Operator: schema.LabelSelectorOpNotIn, Values: v}
	}
	tests := []struct {
		in   string
		want schema.LabelSelector
	}{
		{"", schema.LabelSelector{}},
		{"  ", schema.LabelSelector{}},
		{"site=lab", schema.LabelSelector{MatchLabels: map[string]string{"site": "lab"}}},
		{"site==lab", schema.LabelSelector{MatchLabels: map[string]string{"site": "lab"}}},
		{" site = lab , fleet/arch=arm64", schema.LabelSelector{MatchLabels: map[string]string{"site": "lab", "fleet/arch": "arm64"}}},
		{"site=", schema.LabelSelector{MatchLabels: map[string]string{"site": ""}}},
		{"site!=lab", schema.LabelSelector{MatchExpressions: []schema.LabelSelectorRequirement{notIn("site", "lab")}}},
		{"site in (b,a)", schema.LabelSelector{MatchExpressions: []schema.LabelSelectorRequirement{in("site", "a", "b")}}},
		{"site notin (a, b)", schema.LabelSelector{MatchExpressions: []schema.LabelSelectorRequirement{notIn("site", "a", "b")}}},
		{"gpu", schema.LabelSelector{MatchExpressions: []schema.LabelSelectorRequirement{{Key: "gpu", Operator: schema.LabelSelectorOpExists}}}},
		{"!gpu", schema.LabelSelector{MatchExpressions: []schema.LabelSelectorRequirement{{Key: "gpu", Operator: schema.LabelSelectorOpDoesNotExist}}}},
		// The same key twice keeps both requirements.
		{"a=1,a=2", schema.LabelSelector{MatchLabels: map[string]string{"a": "1"}, MatchExpressions: []schema.LabelSelectorRequirement{in("a", "2")}}},
		{"a=1,a=1", schema.LabelSelector{MatchLabels: map[string]string{"a": "1"}}},
		{"tier,site=lab,!gpu", schema.LabelSelector{
			MatchLabels: map[string]string{"site": "lab"},
			MatchExpressions: []schema.LabelSelectorRequirement{
				{Key: "gpu", Operator: schema.LabelSelectorOpDoesNotExist},
				{Key: "tier", Operator: schema.LabelSelectorOpExists},
			},
		}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // in the error
	}{
		{"site!", "found '!', expected: in, notin, =, ==, !=, gt, lt"},
		{"site in (a", "expected: ',' or ')'"},
		{"site in a", "expected: '('"},
		{"a=b=c", "found '=', expected: ',' or 'end of string'"},
		{"a,,b", "expected: identifier after ','"},
		{"a=b,", "expected: identifier after ','"},
		{"(a)", "found '('"},
		{"-x-=y", "Invalid value: \"-x-\""},
		{"a=-x", "Invalid value: \"-x\""},
		{"a in (ok,-x)", "Invalid value: \"-x\""},
		{"Example.com/a=b", "lowercase RFC 1123 subdomain"},
		{"a>1", `operator "gt" is not supported`},
		{"a<1", `operator "lt" is not supported`},
		{"a=" + strings.Repeat("v", 64), "must be no more than 63 bytes"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.in, err, tt.want)
		}
	}
}

// TestMatchesAsKubernetes checks that schema.LabelSelector, as Parse
// builds it, matches exactly the label sets apimachinery's own selector
// matches, on random selectors and labels, and that its String form
// parses back to the same selector.
func TestMatchesAsKubernetes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []string{"site", "tier", "gpu", "fleet/arch"}
	vals := []string{"a", "b", "c", ""}
	randLabels := func() map[string]string {
		m := map[string]string{}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				m[k] = vals[rng.IntN(len(vals))]
			}
		}
		return m
	}
	randValues := func() string {
		n := 1 + rng.IntN(3)
		vs := make([]string, n)
		for i := range vs {
			vs[i] = vals[rng.IntN(len(vals)-1)] // no empty value in a set
		}
		return strings.Join(vs, ",")
	}
	for range 500 {
		var terms []string
		for range 1 + rng.IntN(4) {
			k := keys[rng.IntN(len(keys))]
			switch rng.IntN(7) {
			case 0:
				terms = append(terms, k+"="+vals[rng.IntN(len(vals))])
			case 1:
				terms = append(terms, k+"=="+vals[rng.IntN(len(vals))])
			case 2:
				terms = append(terms, k+"!="+vals[rng.IntN(len(vals))])
			case 3:
				terms = append(terms, k+" in ("+randValues()+")")
			case 4:
				terms = append(terms, k+" notin ("+randValues()+")")
			case 5:
				terms = append(terms, k)
			default:
				terms = append(terms, "!"+k)
			}
		}
		s := strings.Join(terms, ",")
		ours, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		theirs, err := labels.Parse(s)
		if err != nil {
			t.Fatalf("labels.Parse(%q): %v", s, err)
		}
		back, err := Parse(ours.String())
		if err != nil {
			t.Fatalf("Parse(String() = %q) of %q: %v", ours.String(), s, err)
		}
		for range 20 {
			l := randLabels()
			want := theirs.Matches(labels.Set(l))
			if got := ours.Matches(l); got != want {
				t.Fatalf("%q on %v: schema matches %v, apimachinery %v (selector %+v)", s, l, got, want, ours)
			}
			if got := back.Matches(l); got != want {
				t.Fatalf("%q (as %q) on %v: matches %v after a round trip, want %v", s, ours.String(), l, got, want)
			}
		}
	}
}

func ExampleParse() {
	sel, err := Parse("site in (lab,shop),!gpu,tier!=canary")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sel.Matches(map[string]string{"site": "lab"}))
	fmt.Println(sel.Matches(map[string]string{"site": "lab", "gpu": "nvidia"}))
	fmt.Println(sel.Matches(map[string]string{"site": "home"}))
	// Output:
	// true
	// false
	// false
}
