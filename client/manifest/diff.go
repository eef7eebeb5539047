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

// owned is the part of an object a manifest owns: the spec of a
// Deployment or Device, the data of a ConfigMap, the type and keys of a
// Secret (each value by its size only).
type owned struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   ownedMetadata     `json:"metadata"`
	Spec       any               `json:"spec,omitempty"`
	Type       string            `json:"type,omitempty"`
	Data       any               `json:"data,omitempty"`
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
	// Values says that a Secret's values differ from the stored ones
	// (DiffOptions.SecretValuesChanged), without showing them.
	Values string `json:"values,omitempty"`
}

type ownedMetadata struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Comparable renders as YAML the part of obj that a manifest owns —
// apiVersion, kind, name, labels, annotations and spec (a ConfigMap's
// data; a Secret's type and keys, each value shown as its size, never
// itself) — leaving out what the hub sets (uid, generation,
// resourceVersion, timestamps, status).
func Comparable(obj schema.Object) (string, error) {
	return comparable(obj, false)
}

func comparable(obj schema.Object, valuesChanged bool) (string, error) {
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
	case *schema.ConfigMap:
		if len(o.Data) > 0 {
			c.Data = o.Data
		}
		c.BinaryData = o.BinaryData
	case *schema.Secret:
		c.Type = o.Type
		if sizes := secretSizes(o); len(sizes) > 0 {
			c.Data = sizes
		}
		if valuesChanged {
			c.Values = "changed (not shown)"
		}
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

// secretSizes stands for a Secret's values: "<N bytes>" per key, from
// what the hub answers (keys) or a manifest holds (data, stringData).
func secretSizes(s *schema.Secret) map[string]string {
	out := map[string]string{}
	if s.Data == nil && s.StringData == nil {
		for k, n := range s.Keys {
			out[k] = fmt.Sprintf("<%d bytes>", n)
		}
	}
	for k, v := range s.Data {
		out[k] = fmt.Sprintf("<%d bytes>", len(v))
	}
	for k, v := range s.StringData {
		out[k] = fmt.Sprintf("<%d bytes>", len(v))
	}
	return out
}

// DiffOptions are what the caller knows beyond the two objects.
type DiffOptions struct {
	// SecretValuesChanged: the hub says the desired Secret's values are
	// not the stored ones (which it never returns); the diff says so
	// without showing them.
	SecretValuesChanged bool
}

// Diff returns the unified diff from live (nil when the object does not
// exist: every line is added) to the decoded and defaulted manifest object
// desired, over their Comparable forms; "" when they do not differ.
func Diff(live schema.Object, desired Object) (string, error) {
	return DiffWith(live, desired, DiffOptions{})
}

// DiffWith is Diff with what the caller knows of the hub's side.
func DiffWith(live schema.Object, desired Object, opts DiffOptions) (string, error) {
	want, err := comparable(withMeta(desired.Object, WithHubLabels(desired.Object, live), withHubAnnotations(desired.Object, live)), opts.SecretValuesChanged)
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
	case *schema.ConfigMap:
		c := *o
		c.Metadata.Labels, c.Metadata.Annotations = labels, annotations
		return &c
	case *schema.Secret:
		c := *o
		c.Metadata.Labels, c.Metadata.Annotations = labels, annotations
		return &c
	}
	return obj
}
