package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestRolloutHistoryAndUndo walks through what an operator does: two
// versions, the history, the details of one revision, an undo, an undo to
// a given revision, and the errors on the way.
func TestRolloutHistoryAndUndo(t *testing.T) {
	e := newEnv(t)
	v2 := strings.Replace(webYAML, "  labels:\n    app: web\n", "  labels:\n    app: web\n  annotations:\n    kubernetes.io/change-cause: nginx 1.27\n", 1)
	v2 = strings.Replace(v2, "nginx:1.25", "nginx:1.27", 1)
	e.ok("", "apply", "-f", e.file("v1.yaml", webYAML))
	e.ok("", "apply", "-f", e.file("v2.yaml", v2))

	out := e.ok("", "rollout", "history", "deployment/web")
	want := regexp.MustCompile(`^deployment/web
REVISION +CHANGE-CAUSE +OUTCOME +CREATED
1 +by admin \(admin\) +<none> +\S+
2 \(current\) +nginx 1\.27 +<none> +\S+
$`)
	if !want.MatchString(out) {
		t.Errorf("history:\n%s", out)
	}
	out = e.ok("", "rollout", "history", "deploy", "web", "--revision", "1")
	for _, s := range []string{"deployment/web with revision #1", "Change Cause:", "by admin (admin)", "nginx:1.25", "Spec Hash:"} {
		if !strings.Contains(out, s) {
			t.Errorf("history --revision 1 lacks %q:\n%s", s, out)
		}
	}
	var list schema.DeploymentRevisionList
	if err := json.Unmarshal([]byte(e.ok("", "rollout", "history", "deployment/web", "-o", "json")), &list); err != nil || len(list.Items) != 2 || list.Items[0].Revision != 2 {
		t.Errorf("history -o json: %+v, %v", list, err)
	}
	if out := e.ok("", "rollout", "history", "deployment/web", "-o", "yaml"); !strings.Contains(out, "kind: DeploymentRevisionList") {
		t.Errorf("history -o yaml:\n%s", out)
	}

	// Undo: back to nginx:1.25, as revision 3; 2 is marked RolledBack.
	gen := e.hub.Deployment("web").Metadata.Generation
	if out := e.ok("", "rollout", "undo", "deployment/web"); out != "deployment/web rolled back\n" {
		t.Errorf("undo: %q", out)
	}
	d := e.hub.Deployment("web")
	if d.Spec.Template.Spec.Containers[0].Image != "nginx:1.25" || d.Metadata.Generation != gen+1 || d.Status.Revision != 3 {
		t.Errorf("after undo: image %s, generation %d (was %d), revision %d", d.Spec.Template.Spec.Containers[0].Image, d.Metadata.Generation, gen, d.Status.Revision)
	}
	if out := e.ok("", "rollout", "history", "deployment/web"); !regexp.MustCompile(`(?m)^2 +nginx 1\.27 +RolledBack`).MatchString(out) {
		t.Errorf("history after undo does not mark 2 RolledBack:\n%s", out)
	}
	// Nothing left to undo to; --to-revision goes exactly there.
	e.fails("no previous revision", "rollout", "undo", "deployment/web")
	e.fails("revision 9", "rollout", "undo", "deployment/web", "--to-revision", "9")
	if out := e.ok("", "rollout", "undo", "deployment/web", "--to-revision", "2"); out != "deployment/web rolled back\n" {
		t.Errorf("undo --to-revision 2: %q", out)
	}
	if out := e.ok("", "rollout", "undo", "deployment/web", "--to-revision", "4"); !strings.Contains(out, "skipped rollback (current template already matches revision 4)") {
		t.Errorf("undo to the current revision: %q", out)
	}

	e.fails("no revision 7", "rollout", "history", "deployment/web", "--revision", "7")
	e.fails("rollout undo works on deployments, not devices", "rollout", "undo", "device/pi-1")
	e.fails("not found", "rollout", "history", "deployment/nope")
	e.fails("-o wide", "rollout", "history", "deployment/web", "-o", "wide")
}

func TestRolloutPauseResumeRestart(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))

	if out := e.ok("", "rollout", "pause", "deployment/web"); out != "deployment/web paused\n" {
		t.Errorf("pause: %q", out)
	}
	if !e.hub.Deployment("web").Spec.Paused {
		t.Fatal("pause did not set spec.paused")
	}
	if out := e.ok("", "describe", "deployment", "web"); !strings.Contains(out, "Paused:") || !strings.Contains(out, "true") {
		t.Errorf("describe does not say paused:\n%s", out)
	}
	e.fails("already paused", "rollout", "pause", "deployment/web")
	e.fails("paused and cannot be restarted", "rollout", "restart", "deployment/web")
	// A pause is no revision.
	if revs := e.ok("", "rollout", "history", "deployment/web", "-o", "json"); strings.Count(revs, `"revision":`) != 1 {
		t.Errorf("pause made a revision:\n%s", revs)
	}

	if out := e.ok("", "rollout", "resume", "deploy/web"); out != "deployment/web resumed\n" {
		t.Errorf("resume: %q", out)
	}
	e.fails("is not paused", "rollout", "resume", "deployment/web")

	before := time.Now().UTC().Truncate(time.Second)
	if out := e.ok("", "rollout", "restart", "deployment/web"); out != "deployment/web restarted\n" {
		t.Errorf("restart: %q", out)
	}
	d := e.hub.Deployment("web")
	at, err := time.Parse(time.RFC3339, d.Spec.Template.Metadata.Annotations[schema.AnnotationRestartedAt])
	if err != nil || at.Before(before) {
		t.Errorf("restart annotation %v (%v), want an RFC 3339 time from now", d.Spec.Template.Metadata, err)
	}
	if d.Status.Revision != 2 {
		t.Errorf("restart: revision %d, want 2 (a new template)", d.Status.Revision)
	}
	if out := e.ok("", "describe", "deployment", "web"); !strings.Contains(out, "Revision:") {
		t.Errorf("describe does not show the revision:\n%s", out)
	}
	// --now: the new revision skips the update window.
	if out := e.ok("", "rollout", "restart", "deployment/web", "--now"); out != "deployment/web restarted now (update window skipped)\n" {
		t.Errorf("restart --now: %q", out)
	}
	d = e.hub.Deployment("web")
	if got, want := d.Metadata.Annotations[schema.AnnotationUpdateNow], schema.TemplateHash(d.Spec.Template); got != want {
		t.Errorf("restart --now: annotation %s = %q, want the new template's hash %q", schema.AnnotationUpdateNow, got, want)
	}
}

func TestRolloutSubcommandsHelp(t *testing.T) {
	e := newEnv(t)
	for _, sub := range []string{"history", "undo", "pause", "resume", "restart"} {
		out := e.ok("", "rollout", sub, "--help")
		if !strings.Contains(out, "Examples:") || !strings.Contains(out, "fleet rollout "+sub+" deployment/web") {
			t.Errorf("rollout %s --help has no example of itself:\n%s", sub, out)
		}
	}
}
