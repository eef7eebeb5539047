// Package printers is how the fleet CLI shows Fleet objects to people and
// scripts, the way kubectl does: aligned tables (-o table, wide), json,
// yaml, name, jsonpath and custom-columns templates, --sort-by, watch
// streams, FieldPath (the one-field paths of fleet wait
// --for=jsonpath, in the same JSONPath dialect), the multi-line text of
// `fleet describe`, and the credentials
// and setup hints of `fleet device add` and `fleet monitor add`. Any Go
// program that wants the CLI's output can use it. It does no I/O besides
// writing to the io.Writer it is given.
package printers

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// Format is an output format (-o).
type Format string

// The output formats.
const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
	Name  Format = "name"
	// JSONPath prints a JSONPath template (Printer.Template) over the JSON
	// form of what JSON prints: -o jsonpath='{.items[*].metadata.name}'.
	JSONPath Format = "jsonpath"
	// JSONPathFile is JSONPath with the template in a file, which the
	// caller reads: -o jsonpath-file=FILE.
	JSONPathFile Format = "jsonpath-file"
	// CustomColumns prints a table of the columns Printer.Template names:
	// -o custom-columns=NAME:.metadata.name,SITE:.metadata.labels.site.
	CustomColumns Format = "custom-columns"
)

// Formats lists the output formats without an argument, for help and
// completion.
var Formats = []Format{Table, Wide, JSON, YAML, Name}

// TemplateFormats lists the output formats that take an argument after
// "=": the template, its file or the columns.
var TemplateFormats = []Format{JSONPath, JSONPathFile, CustomColumns}

// ParseFormat checks an -o value of the Formats; "" is Table. A command
// that prints templates as well parses with ParseOutput.
func ParseFormat(s string) (Format, error) {
	f, arg, err := ParseOutput(s)
	if err != nil {
		return "", err
	}
	if arg != "" {
		return "", fmt.Errorf("-o %s is not supported here: want one of table, wide, json, yaml or name", f)
	}
	return f, nil
}

// ParseOutput checks an -o value; "" is Table. For a format of
// TemplateFormats it also returns what follows "=": -o jsonpath={.x}
// gives JSONPath and "{.x}".
func ParseOutput(s string) (Format, string, error) {
	if s == "" {
		return Table, "", nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, "", nil
		}
	}
	name, arg, hasArg := strings.Cut(s, "=")
	for _, f := range TemplateFormats {
		if string(f) != name {
			continue
		}
		if !hasArg || arg == "" {
			return "", "", fmt.Errorf("-o %s needs an argument: %s", f, formatUsage[f])
		}
		return f, arg, nil
	}
	return "", "", fmt.Errorf("unknown output format %q: want one of table, wide, json, yaml, name, %s, %s or %s",
		s, formatUsage[JSONPath], formatUsage[JSONPathFile], formatUsage[CustomColumns])
}

var formatUsage = map[Format]string{
	JSONPath:      "jsonpath=TEMPLATE",
	JSONPathFile:  "jsonpath-file=FILE",
	CustomColumns: "custom-columns=HEADER:PATH,...",
}

// Printer writes objects in one format.
type Printer struct {
	Out    io.Writer
	Format Format
	// Template is the JSONPath template of JSONPath, or the HEADER:PATH
	// list of CustomColumns.
	Template string
	// SortBy, a JSONPath such as .metadata.name, sorts the items of every
	// list printed, in any format, by the value at that path in each.
	SortBy string
	// NoHeaders leaves out the header line of tables.
	NoHeaders bool
	// Now is the clock ages are computed against; nil means time.Now.
	Now func() time.Time
	// WatchEvents prints the type of each watch event (ADDED, MODIFIED,
	// DELETED) with it.
	WatchEvents bool

	compiled *compiled    // Template and SortBy, once compiled
	stream   *StreamTable // watch output, once started
	events   int
}

// PrintsEmptyList reports whether the format prints something for a list
// of no objects (json, yaml, jsonpath); for the others, as for kubectl's
// tables, the caller says "No resources found" on stderr.
func (p *Printer) PrintsEmptyList() bool {
	return p.Format == JSON || p.Format == YAML || p.Format == JSONPath
}

// tabular reports whether the format prints a table.
func (p *Printer) tabular() bool {
	return p.Format == Table || p.Format == Wide || p.Format == CustomColumns
}

func (p *Printer) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *Printer) wide() bool { return p.Format == Wide }

func (p *Printer) headers(objectKind string) []string {
	switch {
	case p.NoHeaders:
		return nil
	case p.Format == CustomColumns:
		return p.columnHeaders()
	}
	return Headers(objectKind, p.wide())
}

// row is the table row of an object: its custom columns, or Row.
func (p *Printer) row(obj schema.Object, now time.Time) ([]string, error) {
	if p.Format == CustomColumns {
		return p.columnRow(obj)
	}
	return Row(obj, p.wide(), now), nil
}

// ResourceName is the kind/name form of an object: "deployment/web".
func ResourceName(obj schema.Object) string {
	return strings.ToLower(obj.GetTypeMeta().Kind) + "/" + obj.GetMetadata().Name
}

// PrintObject prints one object (get with a NAME); -o jsonpath runs over
// the object itself.
func (p *Printer) PrintObject(obj schema.Object) error {
	if err := p.Compile(); err != nil {
		return err
	}
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, obj)
	case YAML:
		return writeYAML(p.Out, obj)
	case JSONPath:
		return p.printJSONPath(obj)
	}
	return p.PrintList(client.KindOf(obj.GetTypeMeta().Kind), []schema.Object{obj}, "")
}

// PrintList prints the objects of kind, sorted by SortBy if set: a table,
// one kind/name per line, or the typed List (DeploymentList, DeviceList,
// ConfigMapList, SecretList)
// with resourceVersion in json and yaml, which -o jsonpath runs over. A
// table of no objects prints nothing; the caller says "No resources
// found" on stderr, as kubectl does.
func (p *Printer) PrintList(kind client.Kind, objs []schema.Object, resourceVersion string) error {
	if err := p.Compile(); err != nil {
		return err
	}
	objs = slices.Clone(objs)
	if err := sortItems(p, objs); err != nil {
		return err
	}
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, List(kind, objs, resourceVersion))
	case YAML:
		return writeYAML(p.Out, List(kind, objs, resourceVersion))
	case JSONPath:
		return p.printJSONPath(List(kind, objs, resourceVersion))
	case Name:
		for _, o := range objs {
			if _, err := fmt.Fprintln(p.Out, ResourceName(o)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(objs) == 0 {
		return nil
	}
	rows := make([][]string, len(objs))
	now := p.now()
	for i, o := range objs {
		var err error
		if rows[i], err = p.row(o, now); err != nil {
			return err
		}
	}
	return WriteTable(p.Out, p.headers(kind.Object()), rows)
}

// PrintMixed prints objects that may be of both kinds (get with
// KIND/NAME arguments). -o jsonpath runs over one List of them all, as
// kubectl's does; the other formats print a list (or table) per kind, in
// the order the kinds first appear, tables apart by a blank line.
func (p *Printer) PrintMixed(objs []schema.Object) error {
	if err := p.Compile(); err != nil {
		return err
	}
	var kinds []client.Kind
	byKind := map[client.Kind][]schema.Object{}
	for _, o := range objs {
		k := client.KindOf(o.GetTypeMeta().Kind)
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
		byKind[k] = append(byKind[k], o)
	}
	if p.Format == JSONPath {
		items := slices.Clone(objs)
		if err := sortItems(p, items); err != nil {
			return err
		}
		return p.printJSONPath(struct {
			schema.TypeMeta `json:",inline"`
			Items           []schema.Object `json:"items"`
		}{schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "List"}, items})
	}
	for i, k := range kinds {
		if i > 0 && p.tabular() {
			if _, err := fmt.Fprintln(p.Out); err != nil {
				return err
			}
		}
		if err := p.PrintList(k, byKind[k], ""); err != nil {
			return err
		}
	}
	return nil
}

// List builds the typed list object of kind.
func List(kind client.Kind, objs []schema.Object, resourceVersion string) any {
	tm := schema.TypeMeta{APIVersion: schema.APIVersion, Kind: kind.Object() + "List"}
	md := schema.ListMeta{ResourceVersion: resourceVersion}
	switch kind {
	case client.Devices:
		l := schema.DeviceList{TypeMeta: tm, Metadata: md, Items: []schema.Device{}}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*schema.Device))
		}
		return l
	case client.ConfigMaps:
		l := schema.ConfigMapList{TypeMeta: tm, Metadata: md, Items: []schema.ConfigMap{}}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*schema.ConfigMap))
		}
		return l
	case client.Secrets:
		l := schema.SecretList{TypeMeta: tm, Metadata: md, Items: []schema.Secret{}}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*schema.Secret))
		}
		return l
	case client.Deployments:
		l := schema.DeploymentList{TypeMeta: tm, Metadata: md, Items: []schema.Deployment{}}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*schema.Deployment))
		}
		return l
	default:
		// A kind added to schema's table since: its generic list.
		k, _ := schema.KindOfResource(string(kind))
		return k.NewList(objs, resourceVersion)
	}
}

// WatchEventOutput is what PrintEvent writes per event with WatchEvents in
// json and yaml.
type WatchEventOutput struct {
	Type   string        `json:"type"`
	Object schema.Object `json:"object"`
}

// StartWatch prints the objects a watch starts from (get -w), as ADDED
// events: the table with its header, or each object in the other formats.
func (p *Printer) StartWatch(kind client.Kind, objs []schema.Object) error {
	if err := p.Compile(); err != nil {
		return err
	}
	objs = slices.Clone(objs)
	if err := sortItems(p, objs); err != nil {
		return err
	}
	if p.tabular() {
		rows := make([][]string, len(objs))
		now := p.now()
		for i, o := range objs {
			var err error
			if rows[i], err = p.eventRow(schema.WatchAdded, o, now); err != nil {
				return err
			}
		}
		st := p.streamTable(kind.Object())
		if len(rows) == 0 && st.started {
			return nil
		}
		return st.Write(rows...)
	}
	for _, o := range objs {
		if err := p.PrintEvent(client.Event{Type: schema.WatchAdded, Object: o}); err != nil {
			return err
		}
	}
	return nil
}

func (p *Printer) streamTable(objectKind string) *StreamTable {
	if p.stream == nil {
		h := p.headers(objectKind)
		if h != nil && p.WatchEvents {
			h = append([]string{"EVENT"}, h...)
		}
		p.stream = NewStreamTable(p.Out, h)
		if p.WatchEvents {
			// Room for the longest event type from the start.
			p.stream.widths = []int{len(schema.WatchModified) + columnPadding}
		}
	}
	return p.stream
}

func (p *Printer) eventRow(typ string, obj schema.Object, now time.Time) ([]string, error) {
	row, err := p.row(obj, now)
	if err != nil {
		return nil, err
	}
	if p.WatchEvents {
		row = append([]string{typ}, row...)
	}
	return row, nil
}

// PrintEvent prints one watch event: a table row (after the header, the
// first time), kind/name, or the object in json or yaml. With WatchEvents
// it prints the event type too: an EVENT column, or {"type","object"}
// (which -o jsonpath then runs over).
func (p *Printer) PrintEvent(ev client.Event) error {
	if err := p.Compile(); err != nil {
		return err
	}
	obj := ev.Object
	var v any = obj
	if p.WatchEvents {
		v = WatchEventOutput{Type: ev.Type, Object: obj}
	}
	switch p.Format {
	case JSON, YAML:
		return p.writeWatchObject(v)
	case JSONPath:
		return p.printJSONPath(v)
	case Name:
		if p.WatchEvents {
			_, err := fmt.Fprintf(p.Out, "%s %s\n", ev.Type, ResourceName(obj))
			return err
		}
		_, err := fmt.Fprintln(p.Out, ResourceName(obj))
		return err
	}
	row, err := p.eventRow(ev.Type, obj, p.now())
	if err != nil {
		return err
	}
	return p.streamTable(obj.GetTypeMeta().Kind).Write(row)
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

func writeYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// WriteJSON writes v as indented JSON, as `-o json` does.
func WriteJSON(w io.Writer, v any) error { return writeJSON(w, v) }

// WriteYAML writes v as YAML (keys sorted), as `-o yaml` does.
func WriteYAML(w io.Writer, v any) error { return writeYAML(w, v) }
