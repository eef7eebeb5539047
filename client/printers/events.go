package printers

import (
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Headers of the event table (`fleet events`).
var (
	eventHeaders     = []string{"LAST-SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}
	eventWideHeaders = []string{"LAST-SEEN", "TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"}
)

// EventObject is the OBJECT column of an event: pod/DEVICE/POD (with
// /CONTAINER) for an event of a pod, device/DEVICE for one of the agent.
func EventObject(ev schema.Event) string {
	switch {
	case ev.Pod != "" && ev.Container != "":
		return "pod/" + ev.Device + "/" + ev.Pod + "/" + ev.Container
	case ev.Pod != "":
		return "pod/" + ev.Device + "/" + ev.Pod
	}
	return "device/" + ev.Device
}

// PrintEvents prints events of several devices, oldest first: a table
// (wide adds the time the agent stamped), or an EventList in json and
// yaml. A table of none prints nothing; the caller says "No events
// found".
func (p *Printer) PrintEvents(events []schema.Event) error {
	if events == nil {
		events = []schema.Event{}
	}
	switch p.Format {
	case JSON, YAML:
		l := schema.EventList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "EventList"}, Items: events}
		if p.Format == JSON {
			return writeJSON(p.Out, l)
		}
		return writeYAML(p.Out, l)
	}
	if len(events) == 0 {
		return nil
	}
	now := p.now()
	rows := make([][]string, len(events))
	for i, ev := range events {
		if p.wide() {
			rows[i] = []string{Age(&ev.Time, now), ev.Time.UTC().Format(time.RFC3339), ev.Type, ev.Reason, EventObject(ev), oneLine(ev.Message)}
		} else {
			rows[i] = []string{Age(&ev.Time, now), ev.Type, ev.Reason, EventObject(ev), oneLine(ev.Message)}
		}
	}
	var h []string
	switch {
	case p.NoHeaders:
	case p.wide():
		h = eventWideHeaders
	default:
		h = eventHeaders
	}
	return WriteTable(p.Out, h, rows)
}
