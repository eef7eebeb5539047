// Package explain describes the fields of Fleet's API types as kubectl
// explain does, for `fleet explain`: it walks a kind's Go type by
// reflection, as encoding/json sees it, and prints the doc comments that
// schema's generated table holds (see package fielddoc). It needs no hub
// and no source tree.
//
// The resources it describes are the kinds of schema's table (Kinds),
// and whatever else a caller adds, such as the CLI's pods: a Resource
// whose type is not in package schema carries its own docs.
package explain

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Resource is a resource type that explain describes.
type Resource struct {
	// Kind is the name KIND: prints ("Deployment").
	Kind string
	// Names are the spellings it is asked for by and listed with: plural,
	// singular, then short names.
	Names []string
	// Aliases are further spellings it is asked for by, not listed.
	Aliases []string
	// Type is its Go struct.
	Type reflect.Type
	// Doc, when set, describes it in place of its type's doc comment.
	Doc string
	// FieldDocs describe the fields that Type declares itself, by JSON
	// name, when Type is not one of package schema's.
	FieldDocs map[string]string
	// FieldHints, by field name, are advice for who asks for a field of
	// that name that the resource does not have (a pod's spec).
	FieldHints map[string]string
}

// ForKind is the resource of a kind of schema's table.
func ForKind(k schema.KindInfo) Resource {
	return Resource{Kind: k.Kind, Names: k.Names(), Aliases: k.Aliases, Type: k.Type}
}

// Kinds are the resources of schema's table of kinds: the stored kinds,
// then the payloads, each by name (schema.DocumentedKinds).
func Kinds() (stored, payloads []Resource) {
	for _, kind := range schema.DocumentedKinds() {
		k, _ := schema.LookupKind(kind)
		if k.Stored() {
			stored = append(stored, ForKind(k))
		} else {
			payloads = append(payloads, ForKind(k))
		}
	}
	return stored, payloads
}

// HintError is a mistake in what was asked for, with advice on what to
// ask instead, which a CLI prints on a line of its own.
type HintError struct {
	Err  error
	Hint string
}

func (e *HintError) Error() string { return e.Err.Error() + "\n" + e.Hint }
func (e *HintError) Unwrap() error { return e.Err }

// Explainer describes its resources.
type Explainer struct {
	// Resources are what it describes, in the order it lists them.
	Resources []Resource
}

// TypeList names the resource types for help and errors:
// "deployments (deployment, deploy), ... and events (event, ev)".
func (e *Explainer) TypeList() string {
	var parts []string
	for _, r := range e.Resources {
		parts = append(parts, fmt.Sprintf("%s (%s)", r.Names[0], strings.Join(r.Names[1:], ", ")))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// Target is what one argument of explain names: a resource, or one field
// of it.
type Target struct {
	Resource Resource
	// Path are the field names after the resource.
	Path  []string
	field *Field // nil for the resource itself
}

// typ is the type the target's fields are read from.
func (t Target) typ() reflect.Type {
	if t.field == nil {
		return t.Resource.Type
	}
	return t.field.Type
}

// Resolve parses RESOURCE[.FIELD...] and finds what it names. A mistake
// comes with advice, as a *HintError, when there is some.
func (e *Explainer) Resolve(arg string) (Target, error) {
	segs := strings.Split(arg, ".")
	res, err := e.lookup(segs[0])
	if err != nil {
		return Target{}, err
	}
	t := Target{Resource: res}
	for i, seg := range segs[1:] {
		at := strings.Join(segs[:i+1], ".")
		if seg == "" {
			return Target{}, fmt.Errorf("%q: empty field name after %s", arg, at)
		}
		if strings.Contains(seg, "[") {
			return Target{}, fmt.Errorf("%q: field paths take no list index: write %s", arg, stripIndexes(arg))
		}
		f, err := t.child(seg, at)
		if err != nil {
			return Target{}, err
		}
		t.field = f
		t.Path = append(t.Path, seg)
	}
	return t, nil
}

// child finds the field seg of the target at path at.
func (t Target) child(seg, at string) (*Field, error) {
	st, ok := structOf(t.typ())
	if !ok {
		return nil, fmt.Errorf("field %q does not exist: %s is of type <%s> and has no fields", seg, at, typeName(t.typ()))
	}
	fields := Fields(st)
	idx := slices.IndexFunc(fields, func(f Field) bool { return f.Name == seg })
	if idx >= 0 {
		return &fields[idx], nil
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	typ := st.Name()
	if t.field == nil {
		typ = t.Resource.Kind
	}
	err := fmt.Errorf("field %q does not exist in %s (%s)", seg, at, typ)
	if s := SuggestName(seg, names); s != "" {
		err = fmt.Errorf("field %q does not exist in %s (%s), did you mean %q?", seg, at, typ, s)
	}
	hint := fmt.Sprintf("The fields of %s are: %s.", at, strings.Join(names, ", "))
	if h := t.Resource.FieldHints[seg]; h != "" && t.field == nil {
		hint += "\n" + h
	}
	return nil, &HintError{Err: err, Hint: hint}
}

// stripIndexes drops the list indexes of a path: a.b[0].c → a.b.c.
func stripIndexes(path string) string {
	var b strings.Builder
	depth := 0
	for _, r := range path {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lookup finds a resource type by any of its names or aliases, ignoring
// case.
func (e *Explainer) lookup(word string) (Resource, error) {
	if word == "" {
		return Resource{}, fmt.Errorf("you must name a resource type: %s", e.TypeList())
	}
	var names []string
	for _, r := range e.Resources {
		if slices.ContainsFunc(slices.Concat(r.Names, r.Aliases), func(n string) bool { return strings.EqualFold(n, word) }) {
			return r, nil
		}
		names = append(names, r.Names...)
	}
	err := fmt.Errorf("unknown resource type %q: valid types are %s", word, e.TypeList())
	if s := SuggestName(strings.ToLower(word), names); s != "" {
		err = fmt.Errorf("unknown resource type %q, did you mean %q? Valid types are %s", word, s, e.TypeList())
	}
	return Resource{}, err
}

// Complete completes a resource type, then the field names of a path,
// each with its type after a tab.
func (e *Explainer) Complete(toComplete string) []string {
	var out []string
	i := strings.LastIndex(toComplete, ".")
	if i < 0 {
		for _, r := range e.Resources {
			for _, n := range r.Names {
				if strings.HasPrefix(n, strings.ToLower(toComplete)) {
					out = append(out, n)
				}
			}
		}
		return out
	}
	t, err := e.Resolve(toComplete[:i])
	if err != nil {
		return nil
	}
	st, ok := structOf(t.typ())
	if !ok {
		return nil
	}
	for _, f := range Fields(st) {
		if strings.HasPrefix(f.Name, toComplete[i+1:]) {
			out = append(out, toComplete[:i+1]+f.Name+"\t<"+typeName(f.Type)+">")
		}
	}
	return out
}
