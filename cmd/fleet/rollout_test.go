package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestRolloutStatusFollowsToTheEnd: the command prints each new state of
// the rollout once and exits 0 when every targeted device is ready.
func TestRolloutStatusFollowsToTheEnd(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	gen := e.hub.Deployment("web").Metadata.Generation
	set := func(st schema.DeploymentStatus) {
		t.Helper()
		if err := e.hub.SetDeploymentStatus("web", &st); err != nil {
			t.Fatal(err)
		}
	}
	set(schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Pending: 2})

	out, done := e.background(t.Context(), "rollout", "status", "deployment/web")
	waitFor(t, out, `Waiting for deployment "web" rollout to finish: 0 of 2 devices updated, 0 ready, 2 pending...`)
	set(schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 2, Ready: 1, Pending: 1})
	waitFor(t, out, `2 of 2 devices updated, 1 ready, 1 pending...`)
	select {
	case code := <-done:
		t.Fatalf("exited %d before the rollout finished:\n%s", code, out)
	default:
	}
	set(schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 2, Ready: 2})
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still waiting after the rollout finished:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want one line per state, 3 in all; got\n%s", out)
	}
	if lines[2] != `deployment "web" successfully rolled out to 2 devices` {
		t.Errorf("last line %q", lines[2])
	}
}

func TestRolloutStatusStates(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	gen := e.hub.Deployment("web").Metadata.Generation
	for _, tc := range []struct {
		name string
		st   *schema.DeploymentStatus
		want string
	}{
		{"no status yet", nil, `Waiting for deployment "web" spec update to be observed...`},
		{"an older generation", &schema.DeploymentStatus{ObservedGeneration: gen - 1, Targeted: 1, Updated: 1, Ready: 1},
			`Waiting for deployment "web" spec update to be observed...`},
		{"no device targeted", &schema.DeploymentStatus{ObservedGeneration: gen},
			`deployment "web" successfully rolled out (no device matches its selector)`},
		{"a failed device", &schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 3, Updated: 2, Ready: 1, Failed: 1, Pending: 1},
			`Waiting for deployment "web" rollout to finish: 2 of 3 devices updated, 1 ready, 1 failed, 1 pending...`},
		{"done on one device", &schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 1, Updated: 1, Ready: 1},
			`deployment "web" successfully rolled out to 1 device`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.hub.SetDeploymentStatus("web", tc.st); err != nil {
				t.Fatal(err)
			}
			// -w=false prints the state once and exits 0, finished or not.
			r := e.run("", "rollout", "status", "deployment", "web", "-w=false")
			if r.code != 0 || strings.TrimSpace(r.stdout) != tc.want {
				t.Fatalf("exit %d, stdout %q (want %q), stderr %q", r.code, r.stdout, tc.want, r.stderr)
			}
		})
	}
}

func TestRolloutStatusTimeout(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	gen := e.hub.Deployment("web").Metadata.Generation
	if err := e.hub.SetDeploymentStatus("web", &schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 1, Ready: 1, Pending: 1}); err != nil {
		t.Fatal(err)
	}
	r := e.run("", "rollout", "status", "deploy/web", "--timeout", "1500ms")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	want := `error: timed out after 1.5s waiting for deployment "web" to roll out: 1 of 2 devices ready, 1 pending (fleet get devices -l site=lab shows which)`
	if strings.TrimSpace(r.stderr) != want {
		t.Errorf("stderr %q\nwant   %q", r.stderr, want)
	}
	if !strings.Contains(r.stdout, "1 of 2 devices updated") {
		t.Errorf("no progress printed before the timeout: %q", r.stdout)
	}
}

func TestRolloutStatusDeploymentDeleted(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	gen := e.hub.Deployment("web").Metadata.Generation
	if err := e.hub.SetDeploymentStatus("web", &schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 1, Pending: 1}); err != nil {
		t.Fatal(err)
	}
	out, done := e.background(t.Context(), "rollout", "status", "deployment/web")
	waitFor(t, out, "Waiting for deployment")
	e.ok("", "delete", "deployment", "web")
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(out.String(), `error: deployment "web" was deleted`) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still waiting after the deployment was deleted:\n%s", out)
	}
}

func TestRolloutStatusInterrupted(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	ctx, cancel := context.WithCancel(t.Context())
	out, done := e.background(ctx, "rollout", "status", "deployment/web")
	waitFor(t, out, "Waiting for deployment")
	before := out.String()
	cancel()
	if code := <-done; code != 130 {
		t.Fatalf("interrupted rollout status: exit %d, want 130\n%s", code, out)
	}
	if after := out.String(); after != before {
		t.Errorf("an interrupt printed %q, want nothing", strings.TrimPrefix(after, before))
	}
}

// background runs the CLI until ctx is done; its stdout and stderr (with
// the error as main prints it) go to out, and done gets the exit code.
func (e *env) background(ctx context.Context, args ...string) (out *syncBuffer, done <-chan int) {
	out = &syncBuffer{}
	codes := make(chan int, 1)
	go func() {
		err := run(ctx, args, stdio{
			in: strings.NewReader(""), out: out, err: out,
			getenv: func(k string) string { return e.vars[k] }, workDir: e.dir,
		})
		printError(out, err)
		codes <- exitCode(err)
	}()
	return out, codes
}

func TestRolloutStatusRefusals(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "status", "deployment/nope"}, `Error from server (NotFound)`},
		{[]string{"rollout", "status", "device/pi-1"}, "rollout status works on deployments"},
		{[]string{"rollout", "status", "deployments"}, "name one deployment"},
		{[]string{"rollout", "status", "deployment", "a", "b"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"rollout", "status", "deployment/web", "--timeout", "-1s"}, "--timeout -1s: must not be negative"},
		{[]string{"rollout", "status", "widgets/web"}, `unknown resource type "widgets"`},
	} {
		r := e.run("", tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("fleet %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// stagedWebYAML is webYAML with a Staged strategy.
var stagedWebYAML = strings.Replace(webYAML, "spec:\n  selector:", `spec:
  strategy:
    type: Staged
    staged:
      steps: [{devices: 1}, {percent: 50, pause: 10m}, {percent: 100}]
      failureThreshold: 10%
      autoRollback: true
  selector:`, 1)

// TestRolloutStatusStaged: a Staged rollout's progress names the revision,
// the step, the counts and what it waits for until when; a rollback or a
// stop ends the command with exit 1 and the reason, with or without -w;
// describe shows the rollout, its condition and its events.
func TestRolloutStatusStaged(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", stagedWebYAML))
	dep := e.hub.Deployment("web")
	gen := dep.Metadata.Generation
	until := time.Date(2026, 11, 25, 12, 10, 0, 0, time.UTC)
	status := func(r schema.RolloutStatus) *schema.DeploymentStatus {
		return &schema.DeploymentStatus{ObservedGeneration: gen, Revision: 4, Targeted: r.Targeted, Updated: r.Updated, Ready: r.Ready, Failed: r.Failed, Pending: r.Pending, Rollout: &r}
	}
	for _, tc := range []struct {
		name string
		st   *schema.DeploymentStatus
		code int
		want string
	}{
		{"waiting for health", status(schema.RolloutStatus{Revision: 4, Phase: schema.RolloutProgressing, Step: 2, Steps: 3, Targeted: 100, Updated: 50, Ready: 49, Pending: 51,
			Waiting: "step 2 of 3: 1 device to become healthy (1 starting)", WaitUntil: until}), 0,
			`Waiting for deployment "web" revision 4 to roll out: step 2 of 3, 50 of 100 devices updated, 49 ready, 0 failed, 51 pending; waiting for 1 device to become healthy (1 starting), until 2026-11-25T12:10:00Z...`},
		{"pausing", status(schema.RolloutStatus{Revision: 4, Phase: schema.RolloutProgressing, Step: 2, Steps: 3, Targeted: 100, Updated: 50, Ready: 50, Pending: 50,
			Waiting: "step 2 of 3: pausing 10m0s before step 3", WaitUntil: until}), 0,
			`Waiting for deployment "web" revision 4 to roll out: step 2 of 3, 50 of 100 devices updated, 50 ready, 0 failed, 50 pending; pausing 10m0s before step 3, until 2026-11-25T12:10:00Z...`},
		{"an older revision's plan", &schema.DeploymentStatus{ObservedGeneration: gen, Revision: 5, Targeted: 100, Pending: 100,
			Rollout: &schema.RolloutStatus{Revision: 4, Phase: schema.RolloutComplete}}, 0,
			`Waiting for deployment "web" revision 5 rollout to be planned...`},
		{"complete", status(schema.RolloutStatus{Revision: 4, Phase: schema.RolloutComplete, Step: 3, Steps: 3, Targeted: 100, Updated: 100, Ready: 99, Pending: 1}), 0,
			`deployment "web" successfully rolled out: revision 4, 100 of 100 devices updated, 99 ready, 0 failed, 1 pending`},
		{"rolled back", status(schema.RolloutStatus{Revision: 4, Phase: schema.RolloutRolledBack, Step: 2, Steps: 3, Targeted: 100, Updated: 0, Ready: 0, Failed: 10, Pending: 90,
			Reason: "rolled back to revision 3: 10 of 100 devices failed revision abc, reaching failureThreshold 10%: d1 (CrashLoopBackOff)"}), 1,
			`deployment "web" revision 4 rolled back at step 2 of 3: 0 of 100 devices updated, 0 ready, 10 failed, 90 pending`},
		{"rolled back by the hub", &schema.DeploymentStatus{ObservedGeneration: gen, Revision: 5, Targeted: 100, Updated: 100, Ready: 100,
			Rollout: &schema.RolloutStatus{Revision: 5, LastGoodRevision: 5, Phase: schema.RolloutComplete, Step: 1, Steps: 3, Targeted: 100, Updated: 100, Ready: 100,
				RolledBackFrom: &schema.AutoRollback{Revision: 4, ToRevision: 3, Step: 2, Steps: 3,
					Reason: "rolled back to revision 3: 10 of 100 devices failed revision 4, reaching failureThreshold 10%: d1 (CrashLoopBackOff)"}}}, 1,
			`deployment "web" revision 4 rolled back at step 2 of 3: revision 5 (the template of revision 3) runs, 100 of 100 devices updated, 100 ready, 0 failed, 0 pending`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.hub.SetDeploymentStatus("web", tc.st); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"-w=false", "-w=true"} {
				if tc.code == 0 && w == "-w=true" {
					continue // would wait
				}
				r := e.run("", "rollout", "status", "deployment/web", w)
				if r.code != tc.code || strings.TrimSpace(r.stdout) != tc.want {
					t.Fatalf("%s: exit %d, stdout %q (want %d, %q), stderr %q", w, r.code, r.stdout, tc.code, tc.want, r.stderr)
				}
				if tc.code != 0 && !strings.Contains(r.stderr, "was rolled back: rolled back to revision 3: 10 of 100 devices failed") {
					t.Errorf("%s: stderr does not say why in one line: %q", w, r.stderr)
				}
				if tc.st.Rollout.RolledBackFrom != nil && !strings.Contains(r.stderr, `deployment "web" revision 4 was rolled back: rolled back to revision 3: `+
					`10 of 100 devices failed revision 4, reaching failureThreshold 10%: d1 (CrashLoopBackOff); revision 5, the template of revision 3, is current`) {
					t.Errorf("%s: stderr does not name the failed and the current revision: %q", w, r.stderr)
				}
			}
		})
	}

	st := status(schema.RolloutStatus{Revision: 4, LastGoodRevision: 3, Phase: schema.RolloutRolledBack, Step: 2, Steps: 3, Targeted: 100, Failed: 10, Pending: 90,
		Reason: "rolled back to revision 3: 10 of 100 devices failed",
		Events: []schema.RolloutEvent{{Time: until, Type: schema.EventWarning, Reason: "RolledBack", Message: "rolled back to revision 3: 10 of 100 devices failed"}}})
	st.Conditions = []schema.DeploymentCondition{{Type: schema.ConditionProgressing, Status: "False", Reason: "RolloutRolledBack", Message: "rolled back to revision 3: 10 of 100 devices failed"}}
	if err := e.hub.SetDeploymentStatus("web", st); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "describe", "deployment", "web")
	for _, want := range []string{
		"Strategy:", "Staged (steps 1, 50% pause 10m, 100%; failureThreshold 10%, autoRollback, progressDeadlineSeconds 600)",
		"Revision:", "4 (last good 3)",
		"Phase:", "RolledBack, step 2 of 3",
		"Reason:", "rolled back to revision 3: 10 of 100 devices failed",
		"Condition Progressing:", "False (RolloutRolledBack)",
		"Rollout Events:", "Warning", "RolledBack",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
}
