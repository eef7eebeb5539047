package selector

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetmq/fleet/schema"
)

// FuzzParse: a selector Parse accepts has only valid keys and values,
// matches exactly the label sets apimachinery's parse of the same text
// matches, and its String form parses back to the same selector.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "site=lab", "site==lab", " site = lab , fleet/arch=arm64", "site=", "site!=lab",
		"site in (b,a)", "site notin (a, b)", "gpu", "!gpu", "a=1,a=2", "a=1,a=1", "tier,site=lab,!gpu",
		"site!", "site in (a", "a=b=c", "a,,b", "(a)", "-x-=y", "a in (ok,-x)", "Example.com/a=b", "a>1", "a<1",
		"site in (lab,shop),!gpu,tier!=canary", "a in (),b", "x.io/a-b_c.d=v_1-2.3",
	} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, s string, seed uint64) {
		sel, err := Parse(s)
		if err != nil {
			return
		}
		for k, v := range sel.MatchLabels {
			if schema.ValidateLabelKey(k) != nil || schema.ValidateLabelValue(v) != nil {
				t.Fatalf("Parse(%q) accepted %q=%q", s, k, v)
			}
		}
		for _, r := range sel.MatchExpressions {
			if schema.ValidateLabelKey(r.Key) != nil {
				t.Fatalf("Parse(%q) accepted key %q", s, r.Key)
			}
			for _, v := range r.Values {
				if schema.ValidateLabelValue(v) != nil {
					t.Fatalf("Parse(%q) accepted value %q", s, v)
				}
			}
		}
		str := sel.String()
		back, err := Parse(str)
		if err != nil {
			t.Fatalf("Parse(%q) = %+v, whose String %q does not parse: %v", s, sel, str, err)
		}
		if !reflect.DeepEqual(normal(back), normal(sel)) {
			t.Fatalf("Parse(%q) = %+v, String %q, which parses to %+v", s, sel, str, back)
		}
		theirs, err := labels.Parse(s)
		if err != nil {
			t.Fatalf("Parse accepts %q, apimachinery does not: %v", s, err)
		}
		// Label sets made of the selector's own keys and values, so that
		// every requirement can go either way.
		var keys, values []string
		for k, v := range sel.MatchLabels {
			keys, values = append(keys, k), append(values, v)
		}
		for _, r := range sel.MatchExpressions {
			keys, values = append(keys, r.Key), append(values, r.Values...)
		}
		values = append(values, "", "other")
		slices.Sort(keys)
		rng := rand.New(rand.NewPCG(seed, 0))
		for range 16 {
			l := map[string]string{}
			for _, k := range keys {
				if rng.IntN(4) > 0 {
					l[k] = values[rng.IntN(len(values))]
				}
			}
			want := theirs.Matches(labels.Set(l))
			if got := sel.Matches(l); got != want {
				t.Fatalf("%q on %v: matches %v, apimachinery says %v (selector %+v)", s, l, got, want, sel)
			}
			if got := back.Matches(l); got != want {
				t.Fatalf("%q as %q on %v: matches %v, apimachinery says %v", s, str, l, got, want)
			}
		}
	})
}

// normal is sel with empty collections as nil, so that DeepEqual
// compares meaning rather than allocation.
func normal(sel schema.LabelSelector) schema.LabelSelector {
	if len(sel.MatchLabels) == 0 {
		sel.MatchLabels = nil
	}
	if len(sel.MatchExpressions) == 0 {
		sel.MatchExpressions = nil
	}
	return sel
}
