package printers

import (
	"fmt"
	"io"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// RevisionHeaders are the columns of fleet rollout history.
var RevisionHeaders = []string{"REVISION", "CHANGE-CAUSE", "OUTCOME", "CREATED"}

// PrintRevisions prints a deployment's revisions (newest first, as the hub
// lists them) as fleet rollout history does: a table oldest first, as
// kubectl's, or the DeploymentRevisionList in json or yaml. current is
// the deployment's current revision, marked in the table.
func (p *Printer) PrintRevisions(revs []schema.DeploymentRevision, current int64) error {
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, revisionList(revs))
	case YAML:
		return writeYAML(p.Out, revisionList(revs))
	case Table:
	default:
		return fmt.Errorf("output format %q: rollout history prints table, json or yaml", p.Format)
	}
	now := p.now()
	rows := make([][]string, 0, len(revs))
	for i := len(revs) - 1; i >= 0; i-- {
		r := &revs[i]
		num := fmt.Sprint(r.Revision)
		if r.Revision == current {
			num += " (current)"
		}
		created := r.CreatedAt
		rows = append(rows, []string{num, orNone(oneLine(r.ChangeCause)), orNone(string(r.Outcome)), Age(&created, now)})
	}
	var h []string
	if !p.NoHeaders {
		h = RevisionHeaders
	}
	return WriteTable(p.Out, h, rows)
}

func revisionList(revs []schema.DeploymentRevision) schema.DeploymentRevisionList {
	if revs == nil {
		revs = []schema.DeploymentRevision{}
	}
	return schema.DeploymentRevisionList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentRevisionList"}, Items: revs}
}

// PrintRevision prints one revision: in a table format, its number,
// cause, outcome and pod template as kubectl's rollout history
// --revision does; or the DeploymentRevision in json or yaml.
func (p *Printer) PrintRevision(r *schema.DeploymentRevision) error {
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, r)
	case YAML:
		return writeYAML(p.Out, r)
	case Table:
	default:
		return fmt.Errorf("output format %q: rollout history prints table, json or yaml", p.Format)
	}
	return DescribeRevision(p.Out, r, p.now())
}

// DescribeRevision writes a revision and its pod template.
func DescribeRevision(w io.Writer, r *schema.DeploymentRevision, now time.Time) error {
	d := newDescriber(w, now)
	d.line(0, "deployment/%s with revision #%d", r.Deployment, r.Revision)
	d.line(0, "Change Cause:\t%s", orNone(oneLine(r.ChangeCause)))
	d.line(0, "Outcome:\t%s", orNone(string(r.Outcome)))
	if r.Reason != "" {
		// Whole: this is where the history sends users for why it failed.
		d.line(0, "Reason:\t%s", oneLineText(r.Reason))
	}
	created := r.CreatedAt
	d.line(0, "Created:\t%s", d.time(&created))
	d.line(0, "Pod Template:")
	var labels, annotations map[string]string
	if m := r.Template.Metadata; m != nil {
		labels, annotations = m.Labels, m.Annotations
	}
	d.labels(1, "Labels", labels)
	if len(annotations) > 0 {
		d.labels(1, "Annotations", annotations)
	}
	d.line(1, "Spec Hash:\t%s", orNone(r.Hash))
	d.podSpec(1, &r.Template.Spec)
	return d.flush()
}
