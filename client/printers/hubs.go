package printers

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/schema"
)

var (
	hubHeaders     = []string{"ID", "LEADER", "API", "BROKER", "LEASE-TTL", "LEASE-LEFT", "AGE"}
	hubWideHeaders = append(append([]string{}, hubHeaders...), "VERSION", "LEASE", "STARTED")
)

// PrintHubs prints the hubs of a fleet (GET /v1/hubs): a table with the
// leader first (ID, LEADER, API, BROKER, LEASE-TTL, LEASE-LEFT, AGE; wide
// adds VERSION, LEASE and STARTED), hub/ID lines with -o name, or the
// HubMemberList in json and yaml.
func (p *Printer) PrintHubs(list schema.HubMemberList) error {
	if list.Items == nil {
		list.Items = []schema.HubMember{}
	}
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, list)
	case YAML:
		return writeYAML(p.Out, list)
	case Name:
		for _, m := range list.Items {
			if _, err := fmt.Fprintf(p.Out, "hub/%s\n", m.ID); err != nil {
				return err
			}
		}
		return nil
	case Table, Wide:
	default:
		return fmt.Errorf("-o %s is not supported for hubs: want table, wide, json, yaml or name", p.Format)
	}
	now := p.now()
	rows := make([][]string, len(list.Items))
	for i, m := range list.Items {
		ttl, left := "<none>", "<none>"
		if m.LeaseTTLSeconds > 0 {
			ttl = HumanDuration(time.Duration(m.LeaseTTLSeconds) * time.Second)
		}
		if m.LeaseRemainingSeconds >= 0 && list.Store != "badger" {
			left = HumanDuration(time.Duration(m.LeaseRemainingSeconds) * time.Second)
		}
		age := "<unknown>"
		if !m.Started.IsZero() {
			age = Age(&m.Started, now)
		}
		rows[i] = []string{m.ID, strconv.FormatBool(m.Leader), orNone(m.APIURL), orNone(m.BrokerURL), ttl, left, age}
		if p.wide() {
			started := "<unknown>"
			if !m.Started.IsZero() {
				started = m.Started.UTC().Format(time.RFC3339)
			}
			rows[i] = append(rows[i], orNone(m.Version), orNone(m.Lease), started)
		}
	}
	var h []string
	switch {
	case p.NoHeaders:
	case p.wide():
		h = hubWideHeaders
	default:
		h = hubHeaders
	}
	return WriteTable(p.Out, h, rows)
}
