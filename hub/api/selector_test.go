package api

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestSelectorErrors: a bad labelSelector is a 400 Invalid whose detail
// names labelSelector, quotes the selector and says what is wrong in the
// words kubectl uses.
func TestSelectorErrors(t *testing.T) {
	h := newTestHub(t, Options{})
	tests := []struct {
		selector string
		want     string
	}{
		{"site!", `"site!": unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt`},
		{"site in (a", `"site in (a": unable to parse requirement: found '', expected: ',' or ')'`},
		{"site=a,", `found '', expected: identifier after ','`},
		{"a=b=c", `found '=', expected: ',' or 'end of string'`},
		{"site=-a", `Invalid value: "-a"`},
		{"Site/x=a", `Invalid value: "Site/x"`},
		{"n>1", `"n>1": operator "gt" is not supported for labels`},
	}
	for _, tt := range tests {
		for _, path := range []string{"/v1/devices", "/v1/deployments?watch=true"} {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			r := h.admin(t, "GET", path+sep+"labelSelector="+url.QueryEscape(tt.selector), "")
			if r.Code != http.StatusBadRequest {
				t.Fatalf("%s %q: %d %s, want 400", path, tt.selector, r.Code, r.Body)
			}
			st := r.status(t)
			if st.Reason != ReasonInvalid || len(st.Details) != 1 || st.Details[0].Field != "labelSelector" ||
				!strings.Contains(st.Details[0].Message, tt.want) || !strings.Contains(st.Message, "labelSelector") {
				t.Errorf("%s %q: %+v, want labelSelector: …%s…", path, tt.selector, st, tt.want)
			}
		}
	}
}

func TestParseSelector(t *testing.T) {
	sel, err := ParseSelector("site in (a,b),!gpu")
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(map[string]string{"site": "b"}) || sel.Matches(map[string]string{"site": "b", "gpu": "x"}) || sel.Matches(nil) {
		t.Errorf("%s matches wrongly", sel)
	}
	if sel, err := ParseSelector(""); err != nil || !sel.Empty() {
		t.Errorf(`ParseSelector("") = %v, %v: want the empty selector`, sel, err)
	}
	_, err = ParseSelector("x!")
	var ve *schema.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, schema.ErrInvalid) || ve.Errors[0].Field != "labelSelector" {
		t.Errorf("err = %#v, want a ValidationError naming labelSelector", err)
	}
}

// TestDeploymentMatchExpressions: a Deployment's spec.selector takes
// matchExpressions, stored as sent; a bad one is refused naming the field.
func TestDeploymentMatchExpressions(t *testing.T) {
	h := newTestHub(t, Options{})
	withExprs := func(exprs string) string {
		return strings.Replace(deploymentYAML("web", "nginx:1"), "    matchLabels:\n      site: a\n", "    matchExpressions:\n"+exprs, 1)
	}
	good := withExprs("    - {key: site, operator: In, values: [a, b]}\n    - {key: gpu, operator: DoesNotExist}\n")
	if r := h.admin(t, "POST", "/v1/deployments", good); r.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	r := h.admin(t, "GET", "/v1/deployments/web", "")
	var d schema.Deployment
	if err := jsonUnmarshal(r.Body, &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Selector.String(); got != "site in (a,b),!gpu" || len(d.Spec.Selector.MatchLabels) != 0 {
		t.Errorf("stored selector %q (%+v)", got, d.Spec.Selector)
	}
	// Applying it again changes nothing: no new generation.
	r = h.admin(t, "POST", "/v1/apply", good)
	if r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"action":"unchanged"`) {
		t.Errorf("re-apply: %d %s", r.Code, r.Body)
	}
	// Changing an expression is a spec change: a new generation.
	r = h.admin(t, "POST", "/v1/apply", withExprs("    - {key: site, operator: NotIn, values: [a, b]}\n    - {key: gpu, operator: DoesNotExist}\n"))
	if r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"action":"configured"`) {
		t.Errorf("apply a changed selector: %d %s", r.Code, r.Body)
	}
	r = h.admin(t, "GET", "/v1/deployments/web", "")
	if err := jsonUnmarshal(r.Body, &d); err != nil || d.Metadata.Generation != 2 || d.Spec.Selector.String() != "site notin (a,b),!gpu" {
		t.Errorf("after the change: generation %d, selector %q (%v)", d.Metadata.Generation, d.Spec.Selector.String(), err)
	}
	for _, tt := range []struct{ exprs, field string }{
		{"    - {key: site, operator: in, values: [a]}\n", "spec.selector.matchExpressions[0].operator"},
		{"    - {key: site, operator: Exists}\n    - {key: site, operator: NotIn}\n", "spec.selector.matchExpressions[1].values"},
		{"    - {key: -site, operator: Exists}\n", "spec.selector.matchExpressions[0].key"},
		{"    - {key: site, operator: In, values: [a, -b]}\n", "spec.selector.matchExpressions[0].values[1]"},
		{"    - {key: site, operator: In, value: [a]}\n", "spec.selector.matchExpressions[0].value"},
	} {
		r := h.admin(t, "POST", "/v1/apply", withExprs(tt.exprs))
		if r.Code != http.StatusBadRequest || !hasField(r.status(t), tt.field) {
			t.Errorf("%q: %d %s, want 400 naming %s", tt.exprs, r.Code, r.Body, tt.field)
		}
	}
}
