package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"

	"github.com/fleetmq/fleet/schema"
)

// decodeObject parses a stored object of kind.
func decodeObject(kind string, raw []byte) (schema.Object, error) {
	obj := schema.NewObject(kind)
	if obj == nil {
		return nil, fmt.Errorf("decode %s: unknown kind", kind)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decode stored %s: %w", kind, err)
	}
	return obj, nil
}

// cloneObject deep-copies obj so the store never changes its caller's
// value. An empty TypeMeta is filled in from the Go type, so hub code can
// pass a bare &schema.Device{}.
func cloneObject(obj schema.Object) (schema.Object, error) {
	if obj == nil {
		return nil, fmt.Errorf("%w: no object", schema.ErrInvalid)
	}
	k, ok := schema.KindOfObject(obj)
	if !ok {
		return nil, fmt.Errorf("%w: the store does not hold %T", schema.ErrInvalid, obj)
	}
	kind := k.Kind
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", kind, err)
	}
	out, err := decodeObject(kind, raw)
	if err != nil {
		return nil, err
	}
	tm := out.GetTypeMeta()
	if tm.APIVersion == "" {
		tm.APIVersion = schema.APIVersion
	}
	if tm.Kind == "" {
		tm.Kind = kind
	}
	return out, nil
}

// copyStatus sets dst's status to src's (none when src is nil).
func copyStatus(dst, src schema.Object) {
	switch d := dst.(type) {
	case *schema.Device:
		d.Status = nil
		if s, ok := src.(*schema.Device); ok {
			d.Status = s.Status
		}
	case *schema.Deployment:
		d.Status = nil
		if s, ok := src.(*schema.Deployment); ok {
			d.Status = s.Status
		}
	case *schema.AgentRollout:
		d.Status = nil
		if s, ok := src.(*schema.AgentRollout); ok {
			d.Status = s.Status
		}
	}
}

// hubLabels sets the labels the hub owns: every device carries
// fleet/device=<name>, and a fleet/arch label the hub learnt from the
// agent (in prev) survives an apply that does not mention it.
func hubLabels(obj, prev schema.Object) {
	if _, ok := obj.(*schema.Device); !ok {
		return
	}
	md := obj.GetMetadata()
	if md.Labels == nil {
		md.Labels = map[string]string{}
	}
	md.Labels[schema.LabelDevice] = md.Name
	if prev != nil {
		if arch, ok := prev.GetMetadata().Labels[schema.LabelArch]; ok {
			md.Labels[schema.LabelArch] = arch
		}
	}
}

// compare reports whether obj and prev have the same labels, annotations
// and spec (and status, with withStatus), and whether their specs are the
// same. Specs are compared in canonical JSON form.
func compare(obj, prev schema.Object, withStatus bool) (same, sameSpec bool, err error) {
	a, err := specJSON(obj, false)
	if err != nil {
		return false, false, err
	}
	b, err := specJSON(prev, false)
	if err != nil {
		return false, false, err
	}
	sameSpec = bytes.Equal(a, b)
	md, pmd := obj.GetMetadata(), prev.GetMetadata()
	same = sameSpec && maps.Equal(md.Labels, pmd.Labels) && maps.Equal(md.Annotations, pmd.Annotations)
	if same && withStatus {
		if a, err = specJSON(obj, true); err != nil {
			return false, false, err
		}
		if b, err = specJSON(prev, true); err != nil {
			return false, false, err
		}
		same = bytes.Equal(a, b)
	}
	return same, sameSpec, nil
}

// specJSON encodes the spec (or, with status, the status) of obj; the
// spec of a ConfigMap is its data, that of a Secret its type and values
// (in clear: compare only objects decoded with decodeFull). Go's encoder
// writes struct fields in a fixed order and map keys sorted, so equal
// values give equal bytes.
func specJSON(obj schema.Object, status bool) ([]byte, error) {
	var v any
	switch o := obj.(type) {
	case *schema.ConfigMap:
		v = struct {
			Data       map[string]string `json:"data"`
			BinaryData map[string][]byte `json:"binaryData"`
		}{o.Data, o.BinaryData}
		if status {
			v = nil
		}
	case *schema.Secret:
		v = struct {
			Type string            `json:"type"`
			Data map[string][]byte `json:"data"`
		}{o.Type, o.Data}
		if status {
			v = nil
		}
	case *schema.Device:
		v = o.Spec
		if status {
			v = o.Status
		}
	case *schema.Deployment:
		v = o.Spec
		if status {
			v = o.Status
		}
	default:
		// Another stored kind: its Spec (or Status) field, if it has one.
		if _, ok := schema.KindOfObject(obj); !ok {
			return nil, fmt.Errorf("compare: unknown object %T", obj)
		}
		field := "Spec"
		if status {
			field = "Status"
		}
		if f := reflect.ValueOf(obj).Elem().FieldByName(field); f.IsValid() {
			v = f.Interface()
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("compare: encode: %w", err)
	}
	return b, nil
}
