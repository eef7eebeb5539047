package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestAuditAggregator: per actor, source, action and result, the first
// event of a minute is recorded at once and the others of that minute as
// one entry with their count and time range, when the minute ends (by
// Flush, or the next event of the key); other keys are counted apart;
// past MaxKeys every window closes; nothing is lost.
func TestAuditAggregator(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	g := &AuditAggregator{Now: clk.Now, MaxKeys: 3}
	refusal := func(actor, src, obj string) schema.AuditEntry {
		return schema.AuditEntry{Actor: actor, Role: "monitor", Source: src, Action: "apply", Object: obj, Result: "403", Detail: "may only read"}
	}
	var recorded []schema.AuditEntry
	add := func(e schema.AuditEntry) { recorded = append(recorded, g.Add(e)...) }
	start := clk.Now()
	for i := range 1000 {
		add(refusal("grafana", "10.0.0.1", "deployments/web"))
		if i == 0 {
			clk.Add(time.Second)
		}
	}
	add(refusal("grafana", "10.0.0.2", "deployments/web"))
	if len(recorded) != 2 || recorded[0].Count != 1 || !recorded[0].Time.Equal(start) || recorded[0].Detail != "may only read" || recorded[1].Source != "10.0.0.2" {
		t.Fatalf("within the minute: %+v", recorded)
	}
	if got := g.Flush(false); len(got) != 0 {
		t.Fatalf("flushed before the minute ended: %+v", got)
	}
	clk.Add(time.Minute)
	sum := g.Flush(false)
	if len(sum) != 1 || sum[0].Count != 999 || !sum[0].Time.Equal(start.Add(time.Second)) || !sum[0].Until.Equal(start.Add(time.Second)) ||
		sum[0].Object != "deployments/web" || sum[0].Actor != "grafana" || sum[0].Source != "10.0.0.1" || sum[0].Result != "403" {
		t.Fatalf("summary: %+v", sum)
	}

	// The next minute: varied objects are named in the summary, which the
	// first event of the following minute brings out.
	recorded = nil
	for i := range 12 {
		add(refusal("grafana", "10.0.0.1", fmt.Sprintf("deployments/d%d", i)))
	}
	clk.Add(time.Minute)
	add(refusal("grafana", "10.0.0.1", "x"))
	if len(recorded) != 3 || recorded[1].Count != 11 || recorded[1].Object != "" ||
		!strings.Contains(recorded[1].Detail, "objects: deployments/d1, deployments/d2") || !strings.Contains(recorded[1].Detail, "…") || recorded[2].Count != 1 {
		t.Fatalf("the next minutes: %+v", recorded)
	}

	// Many keys: past MaxKeys every open window closes at once.
	recorded = nil
	add(refusal("grafana", "10.0.0.1", "x")) // counted in the open window
	for i := range 3 {
		add(refusal(fmt.Sprintf("a%d", i), "10.0.0.9", "x"))
	}
	total := 0
	for _, e := range append(recorded, g.Flush(true)...) {
		total += e.Count
	}
	if total != 4 || len(g.Flush(true)) != 0 {
		t.Fatalf("after MaxKeys: %d events counted in %+v, want 4", total, recorded)
	}
}

// BenchmarkAuditAggregatorAdd: the cost of one refusal that is counted,
// not written.
func BenchmarkAuditAggregatorAdd(b *testing.B) {
	g := &AuditAggregator{}
	e := schema.AuditEntry{Actor: "grafana", Role: "monitor", Source: "10.0.0.1", Action: "apply", Result: "403", Detail: "may only read"}
	for b.Loop() {
		g.Add(e)
	}
}
