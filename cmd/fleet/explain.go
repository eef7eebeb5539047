package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

func newExplainCmd(cli *cliContext) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "explain RESOURCE[.FIELD...] [--recursive]",
		Short: "Describe the fields of a resource type, without a hub",
		Long:  explainLong(),
		Example: `  # The fields of a deployment
  fleet explain deployment

  # A field, and the fields below it
  fleet explain deployment.spec.template.spec.containers

  # A device's labels
  fleet explain device.metadata.labels

  # Every field of a device's status, as a tree
  fleet explain device.status --recursive

  # What "fleet get pods -o yaml" prints for each pod
  fleet explain pods`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("want one RESOURCE[.FIELD...] argument, got %d: resource types are %s", len(args), explainTypeList())
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeExplain(toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := resolveExplain(args[0])
			if err != nil {
				return err
			}
			return writeExplain(cli.stdout(), t, recursive)
		},
	}
	cmd.Flags().BoolVar(&recursive, "recursive", false, "list every field below the path as a tree, without descriptions")
	return cmd
}

// explainLong is the help text of fleet explain.
func explainLong() string {
	var b bytes.Buffer
	b.WriteString(`Describe a resource type or one of its fields, as kubectl explain does: the
kind and API version, the field's type and description, then the fields
below it with theirs. A field marked -required- must be set in a manifest;
enum: lists the values a field allows.

RESOURCE is a resource type, optionally followed by a dotted path of field
names as they appear in manifests and in "fleet get -o yaml", such as
deployment.spec.template.spec.containers. The items of a list are described
at the list's path: containers.image, not containers[0].image.
--recursive lists every field below the path as a tree, without
descriptions.

The descriptions are built into fleet (from the doc comments of Fleet's API
types; docs/reference.md has them all), so explain needs no hub.

`)
	wrapText(&b, "Resource types: "+explainTypeList()+".", "")
	return strings.TrimSuffix(b.String(), "\n")
}

// explainResource is a resource type fleet explain describes.
type explainResource struct {
	kind string
	// names are the spellings it is asked for by: plural, singular, then
	// short names.
	names []string
	typ   reflect.Type // a struct
	// doc, when set, describes it in place of its type's doc comment.
	doc string
}

// payloadTypes are the Go types of the kinds schema.NewObject does not
// make: the MQTT payloads.
var payloadTypes = map[string]reflect.Type{
	schema.KindDesiredState:       reflect.TypeFor[schema.DesiredState](),
	schema.KindDeviceStatus:       reflect.TypeFor[schema.DeviceStatus](),
	schema.KindEvent:              reflect.TypeFor[schema.Event](),
	schema.KindRequest:            reflect.TypeFor[schema.Request](),
	schema.KindResponse:           reflect.TypeFor[schema.Response](),
	schema.KindTopReport:          reflect.TypeFor[schema.TopReport](),
	schema.KindTopReportList:      reflect.TypeFor[schema.TopReportList](),
	schema.KindCrashReportList:    reflect.TypeFor[schema.CrashReportList](),
	schema.KindEnrollRequest:      reflect.TypeFor[schema.EnrollRequest](),
	schema.KindEnrollResponse:     reflect.TypeFor[schema.EnrollResponse](),
	schema.KindDeploymentRevision: reflect.TypeFor[schema.DeploymentRevision](),
}

// kindType returns the Go struct of a documented kind, or nil.
func kindType(kind string) reflect.Type {
	if o := schema.NewObject(kind); o != nil {
		return reflect.TypeOf(o).Elem()
	}
	return payloadTypes[kind]
}

// The pods `fleet get pods` lists are not an API kind: they are the pods
// the devices report, each with its device (printers.DevicePod). Their
// own fields are documented here; the rest are schema.PodStatus's.
const podDoc = `Pod is one pod on one device, as the device last reported it: an item of the PodList that "fleet get pods -o yaml" prints.

Pods are not objects of their own. A Deployment runs a pod named after it on every device its selector matches: the pod's spec is the deployment's spec.template.spec (fleet explain deployment.spec.template.spec), and each device reports its pods in its status (fleet explain device.status.pods).`

var podFieldDocs = map[string]string{
	"device":    "Device is the name of the device the pod is on.",
	"reachable": "Reachable is true when the device is online and its last status is fresh. When it is not, the pod is shown as Unknown: it is what the device last said, not what runs now.",
	"deleted":   `Deleted is set only by "fleet get pods -w", for a pod its device no longer reports (or one of a deleted device).`,
}

var podType = reflect.TypeFor[printers.DevicePod]()

// explainResources lists what fleet explain describes: the stored kinds,
// the pods, then the payloads.
func explainResources() []explainResource {
	var stored, payloads []explainResource
	for _, kind := range schema.DocumentedKinds() {
		t := kindType(kind)
		if t == nil {
			continue // TestExplainEveryKind fails
		}
		lower := strings.ToLower(kind)
		plural := lower + "s"
		if strings.HasSuffix(lower, "s") {
			plural = lower + "es"
		}
		r := explainResource{kind: kind, names: []string{plural, lower}, typ: t}
		if schema.NewObject(kind) == nil {
			if kind == schema.KindEvent {
				r.names = append(r.names, "ev")
			}
			payloads = append(payloads, r)
			continue
		}
		// The short names "fleet get" takes, but for their plurals.
		var short []string
		for name, k := range resourceKinds {
			_, isPlural := resourceKinds[strings.TrimSuffix(name, "s")]
			if k.Object() == kind && !slices.Contains(r.names, name) && !(strings.HasSuffix(name, "s") && isPlural) {
				short = append(short, name)
			}
		}
		slices.Sort(short)
		r.names = append(r.names, short...)
		stored = append(stored, r)
	}
	pods := explainResource{kind: "Pod", names: []string{"pods", "pod", "po"}, typ: podType, doc: podDoc}
	return slices.Concat(stored, []explainResource{pods}, payloads)
}

// explainTypeList names the resource types for help and errors:
// "deployments (deployment, deploy), ... and events (event, ev)".
func explainTypeList() string {
	var parts []string
	for _, r := range explainResources() {
		parts = append(parts, fmt.Sprintf("%s (%s)", r.names[0], strings.Join(r.names[1:], ", ")))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// field is one JSON field of a struct.
type field struct {
	name  string
	typ   reflect.Type // as declared: pointers, lists and maps included
	owner reflect.Type // the struct that declares it, whose docs say what it is
}

// explainTarget is what one argument of fleet explain names: a resource,
// or one field of it.
type explainTarget struct {
	res   explainResource
	path  []string // the field names after the resource
	field *field   // nil for the resource itself
}

// typ is the type the target's fields are read from.
func (t explainTarget) typ() reflect.Type {
	if t.field == nil {
		return t.res.typ
	}
	return t.field.typ
}

// resolveExplain parses RESOURCE[.FIELD...] and finds what it names.
func resolveExplain(arg string) (explainTarget, error) {
	segs := strings.Split(arg, ".")
	res, err := lookupExplainResource(segs[0])
	if err != nil {
		return explainTarget{}, err
	}
	t := explainTarget{res: res}
	for i, seg := range segs[1:] {
		at := strings.Join(segs[:i+1], ".")
		if seg == "" {
			return explainTarget{}, fmt.Errorf("%q: empty field name after %s", arg, at)
		}
		if strings.Contains(seg, "[") {
			return explainTarget{}, fmt.Errorf("%q: field paths take no list index: write %s", arg, stripIndexes(arg))
		}
		st, ok := structOf(t.typ())
		if !ok {
			return explainTarget{}, fmt.Errorf("field %q does not exist: %s is of type <%s> and has no fields", seg, at, typeName(t.typ()))
		}
		fields := jsonFields(st)
		idx := slices.IndexFunc(fields, func(f field) bool { return f.name == seg })
		if idx < 0 {
			names := make([]string, len(fields))
			for i, f := range fields {
				names[i] = f.name
			}
			typ := st.Name()
			if t.field == nil {
				typ = t.res.kind
			}
			err := fmt.Errorf("field %q does not exist in %s (%s)", seg, at, typ)
			if s := suggestName(seg, names); s != "" {
				err = fmt.Errorf("field %q does not exist in %s (%s), did you mean %q?", seg, at, typ, s)
			}
			hint := fmt.Sprintf("The fields of %s are: %s.", at, strings.Join(names, ", "))
			if t.res.typ == podType && t.field == nil && seg == "spec" {
				hint += "\nA pod's spec is its deployment's: fleet explain deployment.spec.template.spec"
			}
			return explainTarget{}, &hintError{err: err, hint: hint}
		}
		t.field = &fields[idx]
		t.path = append(t.path, seg)
	}
	return t, nil
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

// lookupExplainResource finds a resource type by any of its names,
// ignoring case.
func lookupExplainResource(word string) (explainResource, error) {
	if word == "" {
		return explainResource{}, fmt.Errorf("you must name a resource type: %s", explainTypeList())
	}
	kind := ""
	if k, ok := resourceKinds[strings.ToLower(word)]; ok {
		kind = k.Object() // every spelling "fleet get" takes
	}
	var names []string
	for _, r := range explainResources() {
		if r.kind == kind || slices.ContainsFunc(r.names, func(n string) bool { return strings.EqualFold(n, word) }) {
			return r, nil
		}
		names = append(names, r.names...)
	}
	err := fmt.Errorf("unknown resource type %q: valid types are %s", word, explainTypeList())
	if s := suggestName(strings.ToLower(word), names); s != "" {
		err = fmt.Errorf("unknown resource type %q, did you mean %q? Valid types are %s", word, s, explainTypeList())
	}
	return explainResource{}, err
}

// jsonFields lists the JSON fields of struct t by name, those of embedded
// structs without a JSON name of their own inlined, as encoding/json does.
func jsonFields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				out = append(out, jsonFields(et)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, field{name: name, typ: f.Type, owner: t})
	}
	slices.SortFunc(out, func(a, b field) int { return strings.Compare(a.name, b.name) })
	return out
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshaler     = reflect.TypeFor[json.Marshaler]()
	textMarshaler     = reflect.TypeFor[encoding.TextMarshaler]()
	schemaPackagePath = reflect.TypeFor[schema.TypeMeta]().PkgPath()
)

// structOf returns the struct whose fields are those of a value of type
// t: t's own, or those of the items of a list or map. ok is false for a
// scalar, or a list or map of them.
func structOf(t reflect.Type) (reflect.Type, bool) {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Map:
			t = t.Elem()
			continue
		case reflect.Slice:
			if t.Elem().Kind() == reflect.Uint8 {
				return nil, false // []byte: a base64 string
			}
			t = t.Elem()
			continue
		}
		break
	}
	if t.Kind() != reflect.Struct || isScalarStruct(t) {
		return nil, false
	}
	return t, true
}

// isScalarStruct reports whether JSON sees a struct as one value
// (time.Time is an RFC 3339 string).
func isScalarStruct(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t == timeType || p.Implements(jsonMarshaler) || p.Implements(textMarshaler)
}

// typeName names a field's type as kubectl explain does: string, integer,
// boolean, []Container, map[string]string, ObjectMeta.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string"
		}
		return "[]" + typeName(t.Elem())
	case reflect.Map:
		return "map[string]" + typeName(t.Elem())
	case reflect.Struct:
		if t == timeType {
			return "string"
		}
		if t.Name() != "" && !isScalarStruct(t) {
			return t.Name()
		}
	}
	return "object"
}

// typeDoc is the doc comment of the struct or named type t stands for.
func typeDoc(t reflect.Type) string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.PkgPath() != schemaPackagePath {
		return ""
	}
	return schema.TypeDoc(t.Name())
}

// enumOf returns the values a field of type t allows, if its type says.
func enumOf(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != schemaPackagePath || t.Kind() != reflect.String {
		return nil
	}
	return schema.EnumValues(t.Name())
}

// fieldInfo documents a field from its declaring struct's doc comments.
func fieldInfo(f field) schema.FieldInfo {
	if f.owner == podType {
		return schema.FieldInfo{Doc: podFieldDocs[f.name]}
	}
	if f.owner.PkgPath() != schemaPackagePath {
		return schema.FieldInfo{}
	}
	info, _ := schema.FieldDoc(f.owner.Name(), f.name)
	return info
}

// explainWidth is the width explain wraps descriptions to.
const explainWidth = 80

// writeExplain prints the target as kubectl explain does: KIND, VERSION,
// FIELD and its ENUM, DESCRIPTION, then FIELDS, with descriptions or,
// recursive, as a tree of names and types.
func writeExplain(w io.Writer, t explainTarget, recursive bool) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "KIND:       %s\nVERSION:    %s\n\n", t.res.kind, schema.APIVersion)
	var desc string
	if t.field == nil {
		desc = t.res.doc
		if desc == "" {
			desc = typeDoc(t.res.typ)
		}
	} else {
		info := fieldInfo(*t.field)
		req := ""
		if info.Required {
			req = " -required-"
		}
		fmt.Fprintf(&b, "FIELD: %s <%s>%s\n", t.field.name, typeName(t.field.typ), req)
		if enum := enumOf(t.field.typ); len(enum) > 0 {
			b.WriteString("ENUM:\n")
			for _, v := range enum {
				fmt.Fprintf(&b, "    %s\n", v)
			}
		}
		b.WriteString("\n")
		desc = info.Doc
		// As kubectl does, an object's description follows the field's.
		if st, ok := structOf(t.field.typ); ok {
			if td := typeDoc(st); td != "" {
				desc = strings.TrimSpace(desc + "\n\n" + td)
			}
		}
	}
	b.WriteString("DESCRIPTION:\n")
	if desc == "" {
		desc = "<empty>"
	}
	wrapText(&b, desc, "    ")
	if st, ok := structOf(t.typ()); ok {
		b.WriteString("\nFIELDS:\n")
		if recursive {
			writeFieldTree(&b, st, "  ", []reflect.Type{st})
		} else {
			for i, f := range jsonFields(st) {
				if i > 0 {
					b.WriteString("\n")
				}
				writeFieldLine(&b, f, "  ")
				if enum := enumOf(f.typ); len(enum) > 0 {
					fmt.Fprintf(&b, "  enum: %s\n", strings.Join(enum, ", "))
				}
				if d := fieldInfo(f).Doc; d != "" {
					wrapText(&b, d, "    ")
				}
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeFieldLine writes "name\t<type>", marked when required.
func writeFieldLine(b *bytes.Buffer, f field, indent string) {
	req := ""
	if fieldInfo(f).Required {
		req = " -required-"
	}
	fmt.Fprintf(b, "%s%s\t<%s>%s\n", indent, f.name, typeName(f.typ), req)
}

// writeFieldTree writes the fields of st and, indented, those below them.
// stack holds the structs being written, so a type that contains itself
// is not expanded again.
func writeFieldTree(b *bytes.Buffer, st reflect.Type, indent string, stack []reflect.Type) {
	for _, f := range jsonFields(st) {
		writeFieldLine(b, f, indent)
		if sub, ok := structOf(f.typ); ok && !slices.Contains(stack, sub) {
			writeFieldTree(b, sub, indent+"  ", append(stack, sub))
		}
	}
}

// wrapText writes text with every line indented and wrapped at
// explainWidth. Paragraphs (lines) keep their breaks; a line indented in
// the text (a list item, a code block) keeps its indent, and code (a tab)
// is not wrapped.
func wrapText(b *bytes.Buffer, text, indent string) {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		if strings.HasPrefix(line, "\t") {
			b.WriteString(indent + "    " + strings.TrimPrefix(line, "\t") + "\n")
			continue
		}
		trimmed := strings.TrimLeft(line, " ")
		prefix := indent + line[:len(line)-len(trimmed)]
		hang := prefix
		if strings.HasPrefix(trimmed, "- ") {
			hang += "  "
		}
		col := 0
		for i, word := range strings.Fields(trimmed) {
			switch {
			case i == 0:
				b.WriteString(prefix + word)
				col = len(prefix) + len(word)
			case col+1+len(word) > explainWidth:
				b.WriteString("\n" + hang + word)
				col = len(hang) + len(word)
			default:
				b.WriteString(" " + word)
				col += 1 + len(word)
			}
		}
		b.WriteString("\n")
	}
}

// suggestName returns the name the mistyped word most likely meant, or ""
// when none is close: one that differs only in case, one a few typing
// mistakes away, or the only one that starts with word.
func suggestName(word string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(n, word) {
			return n
		}
	}
	lw := strings.ToLower(word)
	// A few typing mistakes, fewer in a short word, where any name is a
	// few edits away.
	best, bestDist := "", min(len(word)/3, 3)+1
	for _, n := range names {
		if d := editDistance(lw, strings.ToLower(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, n := range names {
		if len(word) >= 2 && strings.HasPrefix(strings.ToLower(n), lw) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// completeExplain completes a resource type, then the field names of a
// path.
func completeExplain(toComplete string) []string {
	var out []string
	i := strings.LastIndex(toComplete, ".")
	if i < 0 {
		for _, r := range explainResources() {
			for _, n := range r.names {
				if strings.HasPrefix(n, strings.ToLower(toComplete)) {
					out = append(out, n)
				}
			}
		}
		return out
	}
	t, err := resolveExplain(toComplete[:i])
	if err != nil {
		return nil
	}
	st, ok := structOf(t.typ())
	if !ok {
		return nil
	}
	for _, f := range jsonFields(st) {
		if strings.HasPrefix(f.name, toComplete[i+1:]) {
			out = append(out, toComplete[:i+1]+f.name+"\t<"+typeName(f.typ)+">")
		}
	}
	return out
}
