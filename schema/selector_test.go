package schema

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLabelSelectorMatches(t *testing.T) {
	req := func(key string, op LabelSelectorOperator, values ...string) LabelSelectorRequirement {
		return LabelSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	labLabels := map[string]string{"site": "lab", "tier": "edge"}
	tests := []struct {
		name string
		sel  LabelSelector
		yes  []map[string]string
		no   []map[string]string
	}{
		{"empty", LabelSelector{}, []map[string]string{nil, labLabels}, nil},
		{"matchLabels", LabelSelector{MatchLabels: map[string]string{"site": "lab"}},
			[]map[string]string{labLabels}, []map[string]string{nil, {"site": "shop"}, {"tier": "edge"}}},
		{"empty value", LabelSelector{MatchLabels: map[string]string{"site": ""}},
			[]map[string]string{{"site": ""}}, []map[string]string{nil, labLabels}},
		{"In", LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("site", LabelSelectorOpIn, "lab", "shop")}},
			[]map[string]string{labLabels, {"site": "shop"}}, []map[string]string{nil, {"site": "home"}, {"tier": "lab"}}},
		{"NotIn matches a missing label", LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("site", LabelSelectorOpNotIn, "lab")}},
			[]map[string]string{nil, {"site": "shop"}, {"tier": "edge"}}, []map[string]string{labLabels}},
		{"Exists", LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("tier", LabelSelectorOpExists)}},
			[]map[string]string{labLabels, {"tier": ""}}, []map[string]string{nil, {"site": "lab"}}},
		{"DoesNotExist", LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("tier", LabelSelectorOpDoesNotExist)}},
			[]map[string]string{nil, {"site": "lab"}}, []map[string]string{labLabels, {"tier": ""}}},
		{"all must hold", LabelSelector{
			MatchLabels:      map[string]string{"site": "lab"},
			MatchExpressions: []LabelSelectorRequirement{req("tier", LabelSelectorOpIn, "edge"), req("gpu", LabelSelectorOpDoesNotExist)},
		}, []map[string]string{labLabels}, []map[string]string{{"site": "lab", "tier": "edge", "gpu": "yes"}, {"site": "lab", "tier": "core"}}},
		{"unknown operator matches nothing", LabelSelector{MatchExpressions: []LabelSelectorRequirement{req("site", "Like", "lab")}},
			nil, []map[string]string{nil, labLabels}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range tt.yes {
				if !tt.sel.Matches(l) {
					t.Errorf("%s does not match %v, want a match", tt.sel, l)
				}
			}
			for _, l := range tt.no {
				if tt.sel.Matches(l) {
					t.Errorf("%s matches %v, want no match", tt.sel, l)
				}
			}
		})
	}
}

func TestLabelSelectorString(t *testing.T) {
	tests := []struct {
		sel  LabelSelector
		want string
	}{
		{LabelSelector{}, ""},
		{LabelSelector{MatchLabels: map[string]string{"site": "lab", "app": "web"}}, "app=web,site=lab"},
		{LabelSelector{
			MatchLabels: map[string]string{"site": "lab"},
			MatchExpressions: []LabelSelectorRequirement{
				{Key: "tier", Operator: LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "zone", Operator: LabelSelectorOpNotIn, Values: []string{"x"}},
				{Key: "gpu", Operator: LabelSelectorOpExists},
				{Key: "fleet/arch", Operator: LabelSelectorOpDoesNotExist},
			},
		}, "site=lab,tier in (a,b),zone notin (x),gpu,!fleet/arch"},
	}
	for _, tt := range tests {
		if got := tt.sel.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		if got := tt.sel.Empty(); got != (tt.want == "") {
			t.Errorf("%q: Empty() = %v", tt.want, got)
		}
	}
}

func TestValidateSelector(t *testing.T) {
	dep := func(sel LabelSelector) *Deployment {
		return &Deployment{
			TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindDeployment},
			Metadata: ObjectMeta{Name: "web"},
			Spec: DeploymentSpec{
				Selector: sel,
				Template: PodTemplate{Spec: PodSpec{Containers: []Container{{Name: "c", Image: "busybox"}}}},
			},
		}
	}
	exprs := func(r ...LabelSelectorRequirement) LabelSelector { return LabelSelector{MatchExpressions: r} }
	tests := []struct {
		name string
		sel  LabelSelector
		want []FieldError // nil: valid; else these fields, with these words in the message
	}{
		{"every operator", exprs(
			LabelSelectorRequirement{Key: "site", Operator: LabelSelectorOpIn, Values: []string{"lab", "shop"}},
			LabelSelectorRequirement{Key: "site", Operator: LabelSelectorOpNotIn, Values: []string{"home"}},
			LabelSelectorRequirement{Key: "fleet/arch", Operator: LabelSelectorOpExists},
			LabelSelectorRequirement{Key: "example.com/gpu", Operator: LabelSelectorOpDoesNotExist},
		), nil},
		{"with matchLabels", LabelSelector{MatchLabels: map[string]string{"a": "b"},
			MatchExpressions: []LabelSelectorRequirement{{Key: "c", Operator: LabelSelectorOpExists}}}, nil},
		{"empty value in a set", exprs(LabelSelectorRequirement{Key: "a", Operator: LabelSelectorOpIn, Values: []string{""}}), nil},
		{"bad operator", exprs(LabelSelectorRequirement{Key: "a", Operator: "in", Values: []string{"b"}}),
			[]FieldError{{"spec.selector.matchExpressions[0].operator", `unsupported value "in": want In, NotIn, Exists or DoesNotExist`}}},
		{"no operator", exprs(LabelSelectorRequirement{Key: "a"}),
			[]FieldError{{"spec.selector.matchExpressions[0].operator", "required"}}},
		{"no key", exprs(LabelSelectorRequirement{Operator: LabelSelectorOpExists}),
			[]FieldError{{"spec.selector.matchExpressions[0].key", "required"}}},
		{"bad key", exprs(LabelSelectorRequirement{Key: "-a", Operator: LabelSelectorOpExists}),
			[]FieldError{{"spec.selector.matchExpressions[0].key", `key "-a"`}}},
		{"In without values", exprs(LabelSelectorRequirement{Key: "a", Operator: LabelSelectorOpIn}),
			[]FieldError{{"spec.selector.matchExpressions[0].values", "at least one value when operator is In"}}},
		{"NotIn without values", exprs(LabelSelectorRequirement{Key: "a", Operator: LabelSelectorOpNotIn, Values: []string{}}),
			[]FieldError{{"spec.selector.matchExpressions[0].values", "at least one value when operator is NotIn"}}},
		{"Exists with values", exprs(LabelSelectorRequirement{Key: "a", Operator: LabelSelectorOpExists, Values: []string{"b"}}),
			[]FieldError{{"spec.selector.matchExpressions[0].values", "must be empty when operator is Exists"}}},
		{"bad values", exprs(
			LabelSelectorRequirement{Key: "a", Operator: LabelSelectorOpExists},
			LabelSelectorRequirement{Key: "b", Operator: LabelSelectorOpIn, Values: []string{"ok", "not ok", "-x"}},
		), []FieldError{
			{"spec.selector.matchExpressions[1].values[1]", `value "not ok"`},
			{"spec.selector.matchExpressions[1].values[2]", `value "-x"`},
		}},
		{"bad matchLabels still reported", LabelSelector{MatchLabels: map[string]string{"a": "-"}},
			[]FieldError{{"spec.selector.matchLabels[a]", `value "-"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateDeployment(dep(tt.sel))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("valid selector refused: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a *ValidationError", err)
			}
			if len(ve.Errors) != len(tt.want) {
				t.Fatalf("errors %v, want %d", ve.Errors, len(tt.want))
			}
			for _, w := range tt.want {
				if !slices.ContainsFunc(ve.Errors, func(fe FieldError) bool {
					return fe.Field == w.Field && strings.Contains(fe.Message, w.Message)
				}) {
					t.Errorf("errors %v, want %s with %q", ve.Errors, w.Field, w.Message)
				}
			}
		})
	}
}
