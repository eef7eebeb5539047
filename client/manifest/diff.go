package manifest

import (
	"fmt"
	"maps"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/client/linediff"
	"github.com/fleetmq/fleet/schema"
)

// DiffContext is the number of unchanged lines shown around a change.
const DiffContext = 3

// owned is the part of an object a manifest owns.
type owned struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   ownedMetadata `json:"metadata"`
	Spec       any           `json:"spec"`
}

type ownedMetadata struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Comparable renders as YAML the part of obj that a manifest owns —
// apiVersion, kind, name, labels, annotations and spec — leaving out what
// the hub sets (uid, generation, resourceVersion, timestamps, status).
func Comparable(obj schema.Object) (string, error) {
	c := owned{
		APIVersion: obj.GetTypeMeta().APIVersion,
		Kind:       obj.GetTypeMeta().Kind,
		Metadata: ownedMetadata{
			Name:        obj.GetMetadata().Name,
			Labels:      obj.GetMetadata().Labels,
			Annotations: obj.GetMetadata().Annotations,
		},
	}
	switch o := obj.(type) {
	case *schema.Deployment:
		c.Spec = o.Spec
	case *schema.Device:
		c.Spec = o.Spec
	default:
		return "", fmt.Errorf("diff: unknown object type %T", obj)
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("diff %s: %w", obj.GetMetadata().Name, err)
	}
	return string(b), nil
}

// WithHubLabels returns the labels of desired as the hub will store them:
// a device gets fleet/device=<name>, and keeps the fleet/ labels the hub
// set on live (fleet/arch), which a manifest cannot carry.
func WithHubLabels(desired, live schema.Object) map[string]string {
	labels := maps.Clone(desired.GetMetadata().Labels)
	if desired.GetTypeMeta().Kind != schema.KindDevice {
		return labels
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[schema.LabelDevice] = desired.GetMetadata().Name
	if live != nil {
		for k, v := range live.GetMetadata().Labels {
			if _, set := labels[k]; !set && strings.HasPrefix(k, schema.LabelPrefix) {
				labels[k] = v
			}
		}
	}
	return labels
}

// Diff returns the unified diff from live (nil when the object does not
// exist: every line is added) to the decoded and defaulted manifest object
// desired, over their Comparable forms; "" when they do not differ.
func Diff(live schema.Object, desired Object) (string, error) {
	want, err := Comparable(withMeta(desired.Object, WithHubLabels(desired.Object, live), withHubAnnotations(desired.Object, live)))
	if err != nil {
		return "", err
	}
	have := ""
	from := "/dev/null"
	if live != nil {
		if have, err = Comparable(live); err != nil {
			return "", err
		}
		from = desired.Ref() + " (live)"
	}
	to := desired.Ref() + " (" + desired.Source + ")"
	return linediff.Unified(from, to, have, want, DiffContext), nil
}

// withHubAnnotations returns the annotations of desired plus the fleet/
// ones the hub set on live.
func withHubAnnotations(desired, live schema.Object) map[string]string {
	ann := maps.Clone(desired.GetMetadata().Annotations)
	if live == nil {
		return ann
	}
	for k, v := range live.GetMetadata().Annotations {
		if _, set := ann[k]; !set && strings.HasPrefix(k, schema.LabelPrefix) {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[k] = v
		}
	}
	return ann
}

// withMeta returns a shallow copy of obj with other labels and annotations.
func withMeta(obj schema.Object, labels, annotations map[string]string) schema.Object {
	switch o := obj.(type) {
	case *schema.Deployment:
		c := *o
		c.Metadata.Labels, c.Metadata.Annotations = labels, annotations
		return &c
	case *schema.Device:
		c := *o
		c.Metadata.Labels, c.Metadata.Annotations = labels, annotations
		return &c
	}
	return obj
}
