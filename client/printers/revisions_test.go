package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestDescribeRevisionWholeReason: rollout history --revision N is where
// the history sends users for why a revision failed, so the reason is
// shown whole, on one line, however long (the planner names up to three
// failed devices with their reasons).
func TestDescribeRevisionWholeReason(t *testing.T) {
	reason := "rolled back to revision 2: 3 of 40 devices failed revision 3, reaching failureThreshold 5%: " +
		"gateway-north-0001 (ImagePullBackOff), gateway-north-0002 (CrashLoopBackOff),\n  gateway-south-0003 (CreateContainerConfigError) and 1 more"
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	r := &schema.DeploymentRevision{
		Deployment: "web", Revision: 3, Hash: "abc", CreatedAt: now.Add(-time.Hour),
		Outcome: schema.OutcomeFailed, Reason: reason, ChangeCause: "by admin (admin)",
		Template: schema.PodTemplate{Spec: schema.PodSpec{Containers: []schema.Container{{Name: "app", Image: "img:3"}}}},
	}
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: Table, Now: func() time.Time { return now }}
	if err := p.PrintRevision(r); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(strings.Fields(reason), " ")
	if !strings.Contains(b.String(), want) {
		t.Errorf("the reason is not shown whole:\n%s\nwant the line to carry:\n%s", b.String(), want)
	}
	if strings.Contains(b.String(), "...") {
		t.Errorf("the output is cut:\n%s", b.String())
	}
}
