package controller

import (
	"slices"

	"github.com/fleetmq/fleet/schema"
)

// labelIndex maps "key=value" to the names of the devices carrying that
// label, so a selector finds its devices without looking at every device.
type labelIndex map[string]map[string]struct{}

func labelKey(k, v string) string { return k + "=" + v }

func (ix labelIndex) add(name string, labels map[string]string) {
	for k, v := range labels {
		key := labelKey(k, v)
		set := ix[key]
		if set == nil {
			set = map[string]struct{}{}
			ix[key] = set
		}
		set[name] = struct{}{}
	}
}

func (ix labelIndex) remove(name string, labels map[string]string) {
	for k, v := range labels {
		key := labelKey(k, v)
		if set := ix[key]; set != nil {
			delete(set, name)
			if len(set) == 0 {
				delete(ix, key)
			}
		}
	}
}

// selectNames returns, sorted, the devices sel matches. The index narrows
// the candidates to the smallest of the device sets that the matchLabels
// pairs and the In requirements name (an In requirement's set is the union
// over its values); every candidate is then checked against the whole
// selector, so the other requirements (NotIn, Exists, DoesNotExist) hold
// too. A selector with neither pairs nor In looks at every device.
func (f *fleet) selectNames(sel schema.LabelSelector) []string {
	if sel.Empty() {
		return f.names()
	}
	var (
		best     []map[string]struct{}
		bestSize int
		narrowed bool
	)
	consider := func(sets []map[string]struct{}) {
		n := 0
		for _, set := range sets {
			n += len(set)
		}
		if !narrowed || n < bestSize {
			best, bestSize, narrowed = sets, n, true
		}
	}
	for k, v := range sel.MatchLabels {
		consider([]map[string]struct{}{f.index[labelKey(k, v)]})
	}
	for _, r := range sel.MatchExpressions {
		if r.Operator != schema.LabelSelectorOpIn {
			continue
		}
		sets := make([]map[string]struct{}, 0, len(r.Values))
		for _, v := range r.Values {
			sets = append(sets, f.index[labelKey(r.Key, v)])
		}
		consider(sets)
	}
	if !narrowed {
		var out []string
		for _, name := range f.names() {
			if sel.Matches(f.labels(name)) {
				out = append(out, name)
			}
		}
		return out
	}
	out := make([]string, 0, bestSize)
	seen := make(map[string]struct{}, bestSize)
	for _, set := range best {
		for name := range set {
			if _, dup := seen[name]; dup {
				continue
			}
			seen[name] = struct{}{}
			if d, ok := f.model.Device(name); ok && sel.Matches(d.Labels) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}
