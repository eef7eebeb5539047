package client

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// LabelEdit is a change of an object's labels, as `kubectl label` takes
// it: keys to set to a value, keys to remove.
type LabelEdit struct {
	Set    map[string]string
	Remove []string
}

// ParseLabelEdit parses key=value (set) and key- (remove) arguments. Keys
// and values are checked as the hub checks them; keys under the reserved
// fleet/ prefix are refused, since the hub owns them.
func ParseLabelEdit(args []string) (LabelEdit, error) {
	e := LabelEdit{Set: map[string]string{}}
	var errs []error
	for _, a := range args {
		var key string
		if k, v, ok := strings.Cut(a, "="); ok {
			key = k
			if err := schema.ValidateLabelValue(v); err != nil {
				errs = append(errs, fmt.Errorf("label %q: %w", a, err))
			}
			if old, dup := e.Set[k]; dup && old != v {
				errs = append(errs, fmt.Errorf("label %q is given twice, with values %q and %q", k, old, v))
			}
			e.Set[k] = v
		} else if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
			key = k
			if !slices.Contains(e.Remove, k) {
				e.Remove = append(e.Remove, k)
			}
		} else {
			errs = append(errs, fmt.Errorf("%q: want key=value to set a label or key- to remove one", a))
			continue
		}
		if err := schema.ValidateLabelKey(key); err != nil {
			errs = append(errs, fmt.Errorf("label %w", err))
		}
		if strings.HasPrefix(key, schema.LabelPrefix) {
			errs = append(errs, fmt.Errorf("label %q: keys under %s are set by the hub and cannot be changed", key, schema.LabelPrefix))
		}
	}
	for _, k := range e.Remove {
		if _, ok := e.Set[k]; ok {
			errs = append(errs, fmt.Errorf("label %q cannot be both set and removed", k))
		}
	}
	if len(args) == 0 {
		errs = append(errs, errors.New("no label change given: want key=value or key-"))
	}
	if err := errors.Join(errs...); err != nil {
		return LabelEdit{}, err
	}
	return e, nil
}

// LabelResult is the outcome of LabelEdit.Apply.
type LabelResult struct {
	// Labels are the new labels.
	Labels map[string]string
	// Changed is false when the edit changed nothing.
	Changed bool
	// Absent lists the keys to remove that were not there.
	Absent []string
}

// LabelExistsError says that a label already has another value and
// overwriting was not allowed.
type LabelExistsError struct {
	Key, Value string
}

func (e *LabelExistsError) Error() string {
	return fmt.Sprintf("label %q already has the value %q", e.Key, e.Value)
}

// Apply applies the edit to labels (which it leaves alone). Unless
// overwrite, giving an existing key a different value is an error
// (*LabelExistsError, one per key); setting the value a key already has
// is not.
func (e LabelEdit) Apply(labels map[string]string, overwrite bool) (LabelResult, error) {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(e.Set)) {
		if old, ok := labels[k]; ok && old != e.Set[k] && !overwrite {
			errs = append(errs, &LabelExistsError{Key: k, Value: old})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return LabelResult{}, err
	}
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	res := LabelResult{Labels: out}
	for k, v := range e.Set {
		if old, ok := out[k]; !ok || old != v {
			out[k] = v
			res.Changed = true
		}
	}
	for _, k := range e.Remove {
		if _, ok := out[k]; !ok {
			res.Absent = append(res.Absent, k)
			continue
		}
		delete(out, k)
		res.Changed = true
	}
	return res, nil
}
