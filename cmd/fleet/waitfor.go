package main

// The conditions of --for: what each asks of an object, and why one is
// not met yet.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// checkFunc says whether an object meets a condition and, if not, why not.
type checkFunc func(obj schema.Object, now time.Time) (met bool, why string)

// waitCondition is what --for asks of every object.
type waitCondition struct {
	// text is the condition as messages name it: "condition=Online".
	text string
	// deletion: the object must be gone; check is nil.
	deletion bool
	check    map[client.Kind]checkFunc
}

// namedCondition is one condition=NAME of one kind.
type namedCondition struct {
	name  string
	kind  client.Kind
	check checkFunc
}

var waitConditions = []namedCondition{
	{"Online", client.Devices, deviceOnline},
	{"Converged", client.Devices, deviceConverged},
	{"Available", client.Deployments, deploymentRolledOut},
	{"Complete", client.Deployments, deploymentRolledOut},
}

const forUsage = "want condition=NAME[=true|false], delete or jsonpath='{.path}'=VALUE"

// parseWaitFor reads --for for objects of kinds.
func parseWaitFor(s string, kinds []client.Kind) (waitCondition, error) {
	typ, rest, _ := strings.Cut(s, "=")
	switch strings.ToLower(typ) {
	case "delete":
		if rest != "" {
			return waitCondition{}, fmt.Errorf("--for %q: delete takes no value", s)
		}
		return waitCondition{text: "delete", deletion: true}, nil
	case "condition":
		return parseConditionFor(s, rest, kinds)
	case "jsonpath":
		return parseJSONPathFor(s, rest, kinds)
	}
	return waitCondition{}, fmt.Errorf("--for %q: %s", s, forUsage)
}

func parseConditionFor(s, rest string, kinds []client.Kind) (waitCondition, error) {
	name, value, hasValue := strings.Cut(rest, "=")
	want := true
	if hasValue {
		b, err := strconv.ParseBool(value)
		if err != nil {
			return waitCondition{}, fmt.Errorf("--for %q: the value of a condition is true or false", s)
		}
		want = b
	}
	if name == "" {
		return waitCondition{}, fmt.Errorf("--for %q: name the condition, e.g. condition=Online", s)
	}
	c := waitCondition{check: map[client.Kind]checkFunc{}}
	for _, k := range kinds {
		i := slices.IndexFunc(waitConditions, func(nc namedCondition) bool { return nc.kind == k && strings.EqualFold(nc.name, name) })
		if i < 0 {
			var names []string
			for _, nc := range waitConditions {
				if nc.kind == k {
					names = append(names, nc.name)
				}
			}
			return waitCondition{}, fmt.Errorf("--for %q: %s have no condition %q; theirs are %s", s, k, name, strings.Join(names, ", "))
		}
		nc := waitConditions[i]
		c.text = "condition=" + nc.name
		check := nc.check
		if !want {
			c.text += "=false"
			check = func(obj schema.Object, now time.Time) (bool, string) {
				if met, _ := nc.check(obj, now); met {
					return false, nc.name + " is still true"
				}
				return true, ""
			}
		}
		c.check[k] = check
	}
	return c, nil
}

func deviceOnline(obj schema.Object, now time.Time) (bool, string) {
	st := obj.(*schema.Device).Status
	switch {
	case st == nil || !st.Online && st.LastSeen == nil:
		return false, "its agent has never reported"
	case st.Stale:
		return false, "stale: nothing heard from it" + lastSeen(st, now)
	case !st.Online:
		return false, "offline" + lastSeen(st, now)
	}
	return true, ""
}

func lastSeen(st *schema.DeviceObservedInfo, now time.Time) string {
	if st.LastSeen == nil {
		return ""
	}
	return ", last seen " + printers.HumanDuration(now.Sub(*st.LastSeen)) + " ago"
}

// deviceConverged is the hub's own verdict (status.converged, computed by
// the controller from the device's report); the reason says what is
// missing.
func deviceConverged(obj schema.Object, now time.Time) (bool, string) {
	d := obj.(*schema.Device)
	st := d.Status
	if st == nil {
		return false, "its agent has never reported"
	}
	if st.Converged {
		return true, ""
	}
	var why string
	if st.ObservedGeneration < st.DesiredGeneration {
		why = fmt.Sprintf("has applied generation %d of %d", st.ObservedGeneration, st.DesiredGeneration)
	} else {
		var pods []string
		for _, p := range printers.PodsOf(d, nil) {
			if !p.Ready && p.Phase != schema.PhaseSucceeded {
				pods = append(pods, fmt.Sprintf("%s (%s)", p.Name, printers.PodStatusText(p)))
			}
		}
		why = "pods not ready: " + strings.Join(pods, ", ")
		if len(pods) == 0 {
			why = "not every pod it should run is reported yet"
		}
	}
	if online, _ := deviceOnline(obj, now); !online {
		why += " (offline" + lastSeen(st, now) + ")"
	}
	return false, why
}

// deploymentRolledOut is "fleet rollout status"'s verdict.
func deploymentRolledOut(obj schema.Object, _ time.Time) (bool, string) {
	d := obj.(*schema.Deployment)
	if _, done := rolloutProgress(d); done {
		return true, ""
	}
	if d.Status == nil || d.Status.ObservedGeneration < d.Metadata.Generation {
		return false, fmt.Sprintf("the hub has not yet observed generation %d", d.Metadata.Generation)
	}
	return false, rolloutShortfall(d)
}

// parseJSONPathFor reads --for=jsonpath='{.path}'=VALUE (or .path=VALUE);
// the path is the printers' FieldPath, the one field of -o jsonpath.
func parseJSONPathFor(s, rest string, kinds []client.Kind) (waitCondition, error) {
	expr, value, hasValue := rest, "", false
	if strings.HasPrefix(rest, "{") {
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return waitCondition{}, fmt.Errorf("--for %q: no } closes the path", s)
		}
		expr = rest[1:end]
		if after := rest[end+1:]; after != "" {
			if !strings.HasPrefix(after, "=") {
				return waitCondition{}, fmt.Errorf("--for %q: want jsonpath='{.path}'=VALUE", s)
			}
			value, hasValue = after[1:], true
		}
	} else {
		expr, value, hasValue = strings.Cut(rest, "=")
	}
	path, err := printers.ParseFieldPath(expr)
	if err != nil {
		return waitCondition{}, fmt.Errorf("--for %q: %w", s, err)
	}
	c := waitCondition{text: "jsonpath={" + expr + "}", check: map[client.Kind]checkFunc{}}
	if hasValue {
		c.text += "=" + value
	}
	check := func(obj schema.Object, _ time.Time) (bool, string) {
		got, set := path.Lookup(obj)
		switch {
		case !set:
			return false, expr + " is not set"
		case !hasValue, got == value:
			return true, ""
		}
		return false, fmt.Sprintf("%s is %s", expr, got)
	}
	for _, k := range kinds {
		c.check[k] = check
	}
	return c, nil
}
