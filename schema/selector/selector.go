// Package selector parses label selectors written the way kubectl's -l and
// the Kubernetes labelSelector query parameter take them:
//
//	site=lab             the label is set to lab (also site==lab)
//	site!=lab            the label is not set, or set to another value
//	site in (a,b)        the label is set to a or b
//	site notin (a,b)     the label is not set, or set to neither
//	site                 the label is set, to any value
//	!site                the label is not set
//
// joined by commas, all of which must hold. The result is a
// schema.LabelSelector, so the hub's API, the CLI and the fake hub of
// tests match labels with the one implementation the Deployments'
// selectors use.
//
// It is a leaf next to schema, shared by server and client, and like
// schema it does no I/O. The parsing is k8s.io/apimachinery's, so errors
// read as kubectl's do; that is why it is a package of its own and not part
// of schema: the edge agent imports schema but must not link apimachinery
// (cmd/fleet-agent's dependency test checks).
package selector

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetmq/fleet/schema"
)

// Parse parses a label selector; "" (or blanks) is the empty selector,
// which matches everything. Every key and value must also pass
// schema.ValidateLabelKey and schema.ValidateLabelValue. The error does
// not quote s: callers say where it came from.
func Parse(s string) (schema.LabelSelector, error) {
	parsed, err := labels.Parse(s)
	if err != nil {
		return schema.LabelSelector{}, err
	}
	reqs, _ := parsed.Requirements()
	var out schema.LabelSelector
	for _, r := range reqs {
		key, op, values := r.Key(), r.Operator(), r.ValuesUnsorted()
		if err := schema.ValidateLabelKey(key); err != nil {
			return schema.LabelSelector{}, err
		}
		for _, v := range values {
			if err := schema.ValidateLabelValue(v); err != nil {
				return schema.LabelSelector{}, fmt.Errorf("key %q: %w", key, err)
			}
		}
		switch op {
		case selection.Equals, selection.DoubleEquals:
			// A second value for the same key cannot be a second map
			// entry; as a requirement it keeps its meaning (it matches
			// nothing, as in Kubernetes).
			if old, dup := out.MatchLabels[key]; !dup || old == values[0] {
				if out.MatchLabels == nil {
					out.MatchLabels = map[string]string{}
				}
				out.MatchLabels[key] = values[0]
				continue
			}
			out.MatchExpressions = append(out.MatchExpressions, requirement(key, schema.LabelSelectorOpIn, values))
		case selection.NotEquals:
			out.MatchExpressions = append(out.MatchExpressions, requirement(key, schema.LabelSelectorOpNotIn, values))
		case selection.In:
			out.MatchExpressions = append(out.MatchExpressions, requirement(key, schema.LabelSelectorOpIn, values))
		case selection.NotIn:
			out.MatchExpressions = append(out.MatchExpressions, requirement(key, schema.LabelSelectorOpNotIn, values))
		case selection.Exists:
			out.MatchExpressions = append(out.MatchExpressions, requirement(key, schema.LabelSelectorOpExists, nil))
		case selection.DoesNotExist:
			out.MatchExpressions = append(out.MatchExpressions, requirement(key, schema.LabelSelectorOpDoesNotExist, nil))
		default:
			return schema.LabelSelector{}, fmt.Errorf("%q: operator %q is not supported for labels: want =, ==, !=, in, notin, KEY (exists) or !KEY (does not exist)", r.String(), op)
		}
	}
	return out, nil
}

func requirement(key string, op schema.LabelSelectorOperator, values []string) schema.LabelSelectorRequirement {
	return schema.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}
