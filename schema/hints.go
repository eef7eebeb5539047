package schema

import (
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Hints are short lines printed under a manifest's field errors that say
// how to fix them: above all, how a Kubernetes manifest converts to Fleet's
// resources, whose fields are Kubernetes' where the concept is the same.

// hintError is a decoding error with hints. Its message is the wrapped
// error's, then one "  hint: ..." line per hint.
type hintError struct {
	err   error
	hints []string
}

func (e *hintError) Error() string {
	var b strings.Builder
	b.WriteString(e.err.Error())
	for _, h := range e.hints {
		b.WriteString("\n  hint: ")
		b.WriteString(h)
	}
	return b.String()
}

func (e *hintError) Unwrap() error { return e.err }

// withHints adds hints to err, a *ValidationError; it returns err itself
// when there are none.
func withHints(err error, hints hintList) error {
	if err == nil || len(hints) == 0 {
		return err
	}
	return &hintError{err: err, hints: hints}
}

// Hints returns the hints of a Decode or DecodeManifests error, those of
// every document in order, without the "hint: " prefix its message gives
// them.
func Hints(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if he, ok := err.(*hintError); ok {
			out = append(out, he.hints...)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				walk(next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				walk(next)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// hintList collects hints, each once, in the order found.
type hintList []string

func (l *hintList) add(hints ...string) {
	for _, h := range hints {
		if h != "" && !slices.Contains(*l, h) {
			*l = append(*l, h)
		}
	}
}

// fieldKey names a field, known or not, of a Go type of the schema.
type fieldKey struct {
	t    reflect.Type
	name string
}

func fieldOf[T any](name string) fieldKey { return fieldKey{reflect.TypeFor[T](), name} }

// fleetDeployment is what every conversion hint says about Fleet's
// Deployment.
const fleetDeployment = "runs one pod on every device whose labels match spec.selector.matchLabels"

// fieldHints say what to do with a Kubernetes field Fleet does not have.
var fieldHints = map[fieldKey]string{
	fieldOf[ObjectMeta]("namespace"):          "Fleet has no namespaces: delete metadata.namespace",
	fieldOf[DeploymentSpec]("replicas"):       "Fleet has no spec.replicas: the pod runs once on each matching device, so delete replicas and label the devices to run it (fleet device label NAME key=value)",
	fieldOf[DeploymentSpec]("updateStrategy"): "Fleet calls it spec.strategy: type AllAtOnce (the default), RollingUpdate (with rollingUpdate.maxUnavailable) or Staged (waves gated on health, with staged.steps)",
	fieldOf[PodSpec]("nodeSelector"):          "Fleet picks devices with the Deployment's spec.selector.matchLabels (" + LabelDevice + ": NAME picks one): delete nodeSelector",
	fieldOf[Mount]("name"):                    "mounts bind a host path (mounts: [{hostPath: /srv/app, mountPath: /data}]); to mount one of spec.volumes by name, use volumeMounts: [{name: data, mountPath: /data}]",
	fieldOf[ContainerPort]("hostPort"):        "pods use the device's host network: containerPort is the device's port, so delete hostPort",
	fieldOf[Resources]("requests"):            "Fleet has only resources.limits (memory, cpu): move the values you need there",
}

// typeHints say how to write a field Kubernetes types differently.
var typeHints = map[fieldKey]string{
	fieldOf[RollingUpdate]("maxUnavailable"): `write maxUnavailable as a string: "1" or "25%"`,
	fieldOf[StagedStep]("pause"):             "write pause as a duration with its unit: 30s, 10m or 1h30m",
}

// synonyms are Kubernetes field names that Fleet spells differently.
var synonyms = map[fieldKey]string{
	fieldOf[DeploymentSpec]("updateStrategy"): "strategy",
}

// hostnameLabel is the node label Kubernetes pins a pod to one node with.
const hostnameLabel = "kubernetes.io/hostname"

// kindHints say how an object of a Kubernetes kind, or a Fleet kind with a
// Kubernetes apiVersion, converts to Fleet's; raw is the object.
func kindHints(apiVersion, kind string, raw map[string]any) []string {
	switch kind {
	case KindDeployment:
		if apiVersion == APIVersion {
			return nil
		}
		return []string{"Fleet's Deployment (apiVersion: fleet/v1) " + fleetDeployment + ", like a Kubernetes DaemonSet over devices"}
	case "DaemonSet":
		return []string{"a Kubernetes DaemonSet maps to a Fleet Deployment, which " + fleetDeployment +
			": set apiVersion: fleet/v1 and kind: Deployment, and make the selector name the devices' labels"}
	case "ReplicaSet", "StatefulSet":
		return []string{"Fleet has no " + kind + ": its Deployment (apiVersion: fleet/v1, kind: Deployment) " + fleetDeployment}
	case "Pod":
		device := "DEVICE"
		spec, _ := raw["spec"].(map[string]any)
		sel, _ := spec["nodeSelector"].(map[string]any)
		if h, ok := sel[hostnameLabel].(string); ok && isDNS1123Label(h) {
			device = h
		}
		return []string{"a Kubernetes Pod maps to a Fleet Deployment whose selector names one device: " +
			"set apiVersion: fleet/v1 and kind: Deployment, move the pod's spec to spec.template.spec, " +
			"and add spec.selector.matchLabels: {" + LabelDevice + ": " + device + "}"}
	}
	return nil
}

// conversionHints adds the field hints of a Kubernetes object whose kind
// maps to a Fleet Deployment, found by checking its fields against the
// Deployment's. It may modify raw.
func conversionHints(raw map[string]any, kind string, hints *hintList) {
	var c fieldCheck
	switch kind {
	case "DaemonSet", "ReplicaSet", "StatefulSet":
		checkUnknownFields(raw, reflect.TypeFor[Deployment](), "", &c)
	case "Pod":
		checkUnknownFields(raw["metadata"], reflect.TypeFor[ObjectMeta](), "metadata", &c)
		checkUnknownFields(raw["spec"], reflect.TypeFor[PodSpec](), "spec", &c)
	}
	hints.add(c.hints...)
}

// suggestField returns the field of t, whose fields are fields, that the
// unknown key most likely meant, or "" when none is close: the same name
// in another case, Fleet's name for a Kubernetes field, a name within a
// few typing mistakes, or a name the key spells out in full ("enviroment"
// for "env").
func suggestField(t reflect.Type, key string, fields map[string]reflect.Type) string {
	if s, ok := synonyms[fieldKey{t, key}]; ok {
		if _, ok := fields[s]; ok {
			return s
		}
	}
	if _, ok := fieldHints[fieldKey{t, key}]; ok {
		return "" // a Kubernetes field Fleet does not have: no near miss
	}
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n
		}
	}
	lkey := strings.ToLower(key)
	limit := maxEdits(len(key))
	best, bestDist, bestPrefix, tie := "", limit+1, -1, false
	for _, n := range names {
		ln := strings.ToLower(n)
		d := editDistance(lkey, ln, limit+1)
		if d > limit {
			continue
		}
		p := commonPrefix(lkey, ln)
		switch {
		case d < bestDist || (d == bestDist && p > bestPrefix):
			best, bestDist, bestPrefix, tie = n, d, p, false
		case d == bestDist && p == bestPrefix:
			tie = true
		}
	}
	if best != "" && !tie {
		return best
	}
	// The key begins with a whole field name, as a longer word: "environment"
	// for "env", "arguments" for "args", but not "envFrom" for "env".
	best, bestPrefix = "", 0
	for _, n := range names {
		p := commonPrefix(lkey, strings.ToLower(n))
		if p >= 3 && p >= len(n)-1 && len(key) > p && isLower(key[p]) && p > bestPrefix {
			best, bestPrefix = n, p
		}
	}
	return best
}

// maxEdits is how many typing mistakes a key of n bytes may hold and still
// get a suggestion: none in a short key, where any name is a few edits away.
func maxEdits(n int) int {
	switch {
	case n <= 3:
		return 0
	case n <= 5:
		return 1
	case n <= 9:
		return 2
	}
	return 3
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// editDistance is the number of single-byte insertions, deletions,
// substitutions and swaps of neighbours that turn a into b, or limit when
// it is limit or more.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	// Three rows of the classic table: two back, the previous and this one.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin >= limit {
			return limit
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit)
}
