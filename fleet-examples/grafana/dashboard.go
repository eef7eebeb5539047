// Package grafana ships Fleet's Grafana dashboard (fleet-dashboard.json)
// and reads it for the tests: its panels, their Prometheus queries, and
// its template variables. Its test checks the dashboard's structure and
// that every query is valid PromQL naming series the hub exports; the
// end-to-end test runs every query against a real Prometheus scraping a
// real hub.
package grafana

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// DashboardJSON is fleet-dashboard.json as shipped.
//
//go:embed fleet-dashboard.json
var DashboardJSON []byte

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable.
type Variable struct {
	Name       string      `json:"name"`
	Type       string      `json:"type"`
	Query      any         `json:"query"` // a string, or {"query": …} for a Prometheus query variable
	Datasource *Datasource `json:"datasource,omitempty"`
	AllValue   string      `json:"allValue,omitempty"`
	IncludeAll bool        `json:"includeAll,omitempty"`
}

// QueryString is the variable's query: the string itself, or the query
// field of a Prometheus variable's query object.
func (v Variable) QueryString() string {
	switch q := v.Query.(type) {
	case string:
		return q
	case map[string]any:
		s, _ := q["query"].(string)
		return s
	}
	return ""
}

// Datasource names a data source, here always the datasource variable.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is a panel or a row.
type Panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *Datasource `json:"datasource,omitempty"`
	GridPos    GridPos     `json:"gridPos"`
	Targets    []Target    `json:"targets,omitempty"`
	Panels     []Panel     `json:"panels,omitempty"` // a collapsed row's
}

// GridPos is where a panel sits on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Datasource   *Datasource `json:"datasource,omitempty"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat,omitempty"`
}

// Parse decodes a dashboard.
func Parse(data []byte) (Dashboard, error) {
	var d Dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		return Dashboard{}, fmt.Errorf("parse dashboard: %w", err)
	}
	if dec.More() {
		return Dashboard{}, fmt.Errorf("parse dashboard: data after the dashboard object")
	}
	return d, nil
}

// Load decodes the shipped dashboard.
func Load() (Dashboard, error) { return Parse(DashboardJSON) }

// AllPanels returns every panel that is not a row, collapsed rows'
// panels included, in order.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func(ps []Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// Query is one PromQL query of the dashboard and where it is.
type Query struct {
	Where string // "panel 3 (Online) A", "variable device"
	Expr  string
}

// Queries returns every PromQL query: the panels' targets and the query
// variables' label_values(…) selectors.
func (d Dashboard) Queries() []Query {
	var out []Query
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			out = append(out, Query{Where: fmt.Sprintf("panel %d (%s) %s", p.ID, p.Title, t.RefID), Expr: t.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.QueryString()
		if s, ok := strings.CutPrefix(q, "label_values("); ok {
			if i := strings.LastIndex(s, ","); i >= 0 {
				q = s[:i]
			}
		}
		out = append(out, Query{Where: "variable " + v.Name, Expr: q})
	}
	return out
}

// Expand replaces the dashboard's variables in a query by the values a
// Prometheus can run it with: every $job, $device and $deployment by
// ".*" (their "All"), and Grafana's range variables by 5m.
func Expand(expr string) string {
	r := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${job}", ".*", "$job", ".*",
		"${device}", ".*", "$device", ".*", "${deployment}", ".*", "$deployment", ".*")
	return r.Replace(expr)
}
