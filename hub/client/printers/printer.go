// Package printers formats Fleet objects for people and scripts the way
// kubectl does: aligned tables (-o table, wide), json, yaml, name, watch
// streams, and the multi-line text of `fleet describe`. It does no I/O
// besides writing to the io.Writer it is given.
package printers

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/hub/client"
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
)

// Formats lists the output formats, for help and completion.
var Formats = []Format{Table, Wide, JSON, YAML, Name}

// ParseFormat checks an -o value; "" is Table.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return Table, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown output format %q: want one of table, wide, json, yaml, name", s)
}

// Printer writes objects in one format.
type Printer struct {
	Out    io.Writer
	Format Format
	// NoHeaders leaves out the header line of tables.
	NoHeaders bool
	// Now is the clock ages are computed against; nil means time.Now.
	Now func() time.Time
	// WatchEvents prints the type of each watch event (ADDED, MODIFIED,
	// DELETED) with it.
	WatchEvents bool

	stream *StreamTable // watch output, once started
	events int
}

func (p *Printer) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *Printer) wide() bool { return p.Format == Wide }

func (p *Printer) headers(objectKind string) []string {
	if p.NoHeaders {
		return nil
	}
	return Headers(objectKind, p.wide())
}

// ResourceName is the kind/name form of an object: "deployment/web".
func ResourceName(obj schema.Object) string {
	return strings.ToLower(obj.GetTypeMeta().Kind) + "/" + obj.GetMetadata().Name
}

// PrintObject prints one object (get with a NAME).
func (p *Printer) PrintObject(obj schema.Object) error {
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, obj)
	case YAML:
		return writeYAML(p.Out, obj)
	}
	return p.PrintList(client.KindOf(obj.GetTypeMeta().Kind), []schema.Object{obj}, "")
}

// PrintList prints the objects of kind: a table, one kind/name per line, or
// the typed List (DeploymentList, DeviceList) with resourceVersion in json
// and yaml. A table of no objects prints nothing; the caller says "No
// resources found" on stderr, as kubectl does.
func (p *Printer) PrintList(kind client.Kind, objs []schema.Object, resourceVersion string) error {
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, List(kind, objs, resourceVersion))
	case YAML:
		return writeYAML(p.Out, List(kind, objs, resourceVersion))
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
		rows[i] = Row(o, p.wide(), now)
	}
	return WriteTable(p.Out, p.headers(kind.Object()), rows)
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
	default:
		l := schema.DeploymentList{TypeMeta: tm, Metadata: md, Items: []schema.Deployment{}}
		for _, o := range objs {
			l.Items = append(l.Items, *o.(*schema.Deployment))
		}
		return l
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
	if p.Format == Table || p.Format == Wide {
		rows := make([][]string, len(objs))
		now := p.now()
		for i, o := range objs {
			rows[i] = p.eventRow(schema.WatchAdded, o, now)
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

func (p *Printer) eventRow(typ string, obj schema.Object, now time.Time) []string {
	row := Row(obj, p.wide(), now)
	if p.WatchEvents {
		row = append([]string{typ}, row...)
	}
	return row
}

// PrintEvent prints one watch event: a table row (after the header, the
// first time), kind/name, or the object in json or yaml. With WatchEvents
// it prints the event type too: an EVENT column, or {"type","object"}.
func (p *Printer) PrintEvent(ev client.Event) error {
	obj := ev.Object
	var v any = obj
	if p.WatchEvents {
		v = WatchEventOutput{Type: ev.Type, Object: obj}
	}
	switch p.Format {
	case JSON, YAML:
		return p.writeWatchObject(v)
	case Name:
		if p.WatchEvents {
			_, err := fmt.Fprintf(p.Out, "%s %s\n", ev.Type, ResourceName(obj))
			return err
		}
		_, err := fmt.Fprintln(p.Out, ResourceName(obj))
		return err
	}
	return p.streamTable(obj.GetTypeMeta().Kind).Write(p.eventRow(ev.Type, obj, p.now()))
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
