package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	promrules "github.com/fleetmq/fleet/fleet-examples/prometheus"
	"github.com/fleetmq/fleet/test/sysdeps"
)

const dsUID = "${datasource}"

// TestDashboardIsJSON: the file is one JSON object, as Grafana imports it.
func TestDashboardIsJSON(t *testing.T) {
	var v map[string]any
	if err := json.Unmarshal(DashboardJSON, &v); err != nil {
		t.Fatalf("fleet-dashboard.json: %v", err)
	}
	if _, err := Parse([]byte(string(DashboardJSON) + "{}")); err == nil {
		t.Error("Parse accepted data after the dashboard")
	}
}

// TestDashboardStructure: a title and uid; a datasource variable of type
// prometheus that every panel and target uses (no data source is
// hard-wired, so the dashboard imports into any Grafana); every variable
// a query uses is defined; panels have unique ids, at least one target
// each with distinct refIds, and sit on the 24-column grid without
// overlapping.
func TestDashboardStructure(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want all set", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || ds.QueryString() != "prometheus" {
		t.Fatalf("datasource variable %+v: want type datasource, query prometheus", ds)
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != dsUID) {
			t.Errorf("variable %s does not use the datasource variable", v.Name)
		}
	}
	panels := d.AllPanels()
	if len(panels) < 10 {
		t.Fatalf("%d panels, want a dashboard", len(panels))
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		ids[p.ID] = true // rows' ids too
	}
	if len(ids) != len(d.Panels) {
		t.Error("panel ids are not unique")
	}
	varRef := regexp.MustCompile(`\$\{?([a-zA-Z_]+)`)
	for _, p := range panels {
		name := fmt.Sprintf("panel %d (%s)", p.ID, p.Title)
		if p.Title == "" {
			t.Errorf("%s: no title", name)
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != dsUID {
			t.Errorf("%s: datasource %+v, want the datasource variable", name, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no target", name)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q empty or used twice", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s %s: empty expr", name, tg.RefID)
			}
			if tg.Datasource == nil || tg.Datasource.UID != dsUID {
				t.Errorf("%s %s: target datasource %+v, want the datasource variable", name, tg.RefID, tg.Datasource)
			}
			for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
				if _, ok := vars[m[1]]; !ok && !strings.HasPrefix(m[1], "__") {
					t.Errorf("%s %s: uses $%s, which is not a variable", name, tg.RefID, m[1])
				}
			}
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v off the 24-column grid", name, g)
		}
	}
	for i, a := range d.Panels {
		for _, b := range d.Panels[i+1:] {
			if overlap(a.GridPos, b.GridPos) {
				t.Errorf("panels %d (%s) and %d (%s) overlap", a.ID, a.Title, b.ID, b.Title)
			}
		}
	}
}

func overlap(a, b GridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// TestDashboardQueriesNameExportedSeries: every query (panels and
// variables) names at least one series, and each one is in hub/metrics'
// registry, or Prometheus' own up, or pending (the backup series of
// issue 41, promrules.Pending).
func TestDashboardQueriesNameExportedSeries(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	exported, err := promrules.HubSeriesNames()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range d.Queries() {
		names := promrules.Series(q.Expr)
		if len(names) == 0 {
			t.Errorf("%s: %q names no series", q.Where, q.Expr)
		}
		for _, n := range names {
			base := strings.TrimSuffix(n, "_bucket") // histogram series
			if n == "up" || promrules.Pending(n) {
				continue
			}
			if !slices.Contains(exported, n) && !slices.Contains(exported, base) {
				t.Errorf("%s reads %s, which the hub does not export", q.Where, n)
			}
		}
	}
}

// TestDashboardQueriesArePromQL: every query, its variables expanded, is
// valid PromQL: promtool checks them as recording rules of a rule file.
func TestDashboardQueriesArePromQL(t *testing.T) {
	promtool := sysdeps.Require(t, "promtool")
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	file := promrules.RuleFile{Groups: []promrules.Group{{Name: "dashboard"}}}
	for i, q := range d.Queries() {
		file.Groups[0].Rules = append(file.Groups[0].Rules, promrules.Rule{Record: fmt.Sprintf("fleet_dashboard_query_%d", i), Expr: Expand(q.Expr)})
	}
	data, err := file.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's %d queries: %v\n%s", len(file.Groups[0].Rules), err, out)
	}
}

func TestExpand(t *testing.T) {
	got := Expand(`rate(x{job=~"$job", device=~"${device}"}[$__rate_interval])`)
	if want := `rate(x{job=~".*", device=~".*"}[5m])`; got != want {
		t.Errorf("Expand = %q, want %q", got, want)
	}
}
