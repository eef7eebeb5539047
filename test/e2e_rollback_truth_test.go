package test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2ERollbackTruth: a real hub and two real agents on containerd.
//
// After the hub rolls a failed Staged rollout back by itself, the
// Deployment's current revision names what the devices run, as "fleet
// rollout undo" would leave it: fleet get deployment -o json, get
// deployments -o wide, rollout history, rollout status and describe
// agree, the failed revision stays in the history, marked Failed, and
// rollout history --revision shows its reason whole. No container of the
// last good revision stopped on the way.
//
// A Deployment applied together with the Secret and ConfigMap it uses
// (one fleet apply of a multi-document manifest, the Deployment first)
// never reaches a device without them: no device ever reports, in its
// status or its events, CreateContainerConfigError for it.
func TestE2ERollbackTruth(t *testing.T) {
	// Its own device names, so its containerd namespaces (and cgroups)
	// are no other fleet's on this machine.
	f := StartFleet(t, FleetOptions{Agents: 2, DevicePrefix: "truth", Labels: func(int) map[string]string { return e2eAgents }})
	t.Run("auto_rollback_names_what_runs", func(t *testing.T) { e2eAutoRollbackTruth(t, f) })
	t.Run("same_apply_deployment_and_secret", func(t *testing.T) { e2eSameApplySecret(t, f) })
}

func e2eAutoRollbackTruth(t *testing.T, f *Fleet) {
	devs := f.Devices()
	const name = "e2e-truth"
	f.deleteOnCleanup(t, name)
	// Two failures roll back: a transient start error on one device (a
	// busy runc) does not stop v1, and v2 fails on both.
	strategy := stagedStrategy("0s")
	strategy["staged"].(map[string]any)["failureThreshold"] = "2"
	v1 := e2eDep{Name: name, Strategy: strategy}
	f.applyDeps(t, v1)
	awaitStaged(t, f, name, "v1 complete", func(r *schema.RolloutStatus) bool {
		return r.Phase == schema.RolloutComplete && r.Ready == len(devs)
	})
	f.AwaitRollout(t, name, len(devs), e2eConverge)
	h1 := f.PodHash(t, name)
	for _, d := range devs {
		f.AwaitContainerRunning(t, d, name, h1)
	}
	before := f.TaskPIDs(t)

	// v2 cannot be pulled: both devices fail it, the hub rolls back.
	v2 := v1
	v2.Image = "127.0.0.1:1/fleet/app:typo"
	f.applyDeps(t, v2)
	var rev2 schema.DeploymentRevision
	f.Get(t, "/v1/deployments/"+name+"/revisions/2", &rev2)
	h2 := rev2.Hash
	if h2 == "" || h2 == h1 || rev2.Template.Spec.Containers[0].Image != v2.Image {
		t.Fatalf("revision 2 is not v2: %+v", rev2)
	}
	r := awaitStaged(t, f, name, "the automatic rollback written", func(r *schema.RolloutStatus) bool {
		return r.Revision == 3 && r.Phase == schema.RolloutComplete && r.RolledBackFrom != nil && r.Ready == len(devs)
	})
	f.AwaitDevices(t, e2eConverge, "back on v1", func(d schema.Device) bool {
		return d.Status != nil && Converged(d) && slices.ContainsFunc(d.Status.Pods, func(p schema.PodStatus) bool { return p.Name == name && p.Hash == h1 && p.Ready })
	}, devs...)
	samePIDs(t, "an automatic rollback", before, f.TaskPIDs(t))

	// fleet get deployment -o json: the current revision is v1's template.
	var dep schema.Deployment
	if err := json.Unmarshal([]byte(f.CLI(t, "get", "deployment", name, "-o", "json")), &dep); err != nil {
		t.Fatal(err)
	}
	rb := r.RolledBackFrom
	switch {
	case dep.Status == nil || dep.Status.Revision != 3:
		t.Fatalf("get deployment -o json: status %+v, want revision 3", dep.Status)
	case schema.TemplateHash(dep.Spec.Template) != h1 || dep.Spec.Template.Spec.Containers[0].Image != f.Image:
		t.Errorf("the current template is %s (image %s), want v1's %s (image %s)",
			schema.TemplateHash(dep.Spec.Template), dep.Spec.Template.Spec.Containers[0].Image, h1, f.Image)
	case dep.Status.Rollout == nil || dep.Status.Rollout.Revision != 3 || dep.Status.Rollout.Hash != h1:
		t.Errorf("the rollout is not about the current revision: %+v", dep.Status.Rollout)
	case rb.Revision != 2 || rb.Hash != h2 || rb.ToRevision != 1 || rb.Step != 2 || rb.Steps != 2 ||
		!strings.Contains(rb.Reason, "rolled back to revision 1") || !strings.Contains(rb.Reason, "ImagePullBackOff"):
		t.Errorf("rolledBackFrom: %+v", rb)
	}
	for _, d := range devs {
		if got := runsPod(f, t, name, schema.TemplateHash(dep.Spec.Template)); !slices.Contains(got, d) {
			t.Errorf("%s does not report the current revision's hash: %v do", d, got)
		}
	}
	if wide := f.CLI(t, "get", "deployments", "-o", "wide"); !regexp.MustCompile(`(?m)^`+name+` .*`+regexp.QuoteMeta(f.Image)).MatchString(wide) || strings.Contains(wide, "typo") {
		t.Errorf("get deployments -o wide does not show v1's image:\n%s", wide)
	}

	// The history: 2 Failed, 3 the rollback (1 renumbered), as an undo.
	hist := f.CLI(t, "rollout", "history", "deployment/"+name)
	if !regexp.MustCompile(`(?m)^2 +.*Failed`).MatchString(hist) ||
		!regexp.MustCompile(`(?m)^3 \(current\) +rollback to revision 1 by the hub \(revision 2 failed its staged rollout\)`).MatchString(hist) ||
		regexp.MustCompile(`(?m)^1 `).MatchString(hist) {
		t.Errorf("rollout history after the automatic rollback:\n%s", hist)
	}
	var list schema.DeploymentRevisionList
	if err := json.Unmarshal([]byte(f.CLI(t, "rollout", "history", "deployment/"+name, "-o", "json")), &list); err != nil ||
		len(list.Items) != 2 || list.Items[0].Revision != dep.Status.Revision || list.Items[0].Hash != h1 {
		t.Errorf("rollout history -o json: %+v, %v", list.Items, err)
	}

	// --revision 2: the reason, whole.
	if len(rb.Reason) <= 80 {
		t.Fatalf("the reason %q is too short to show it is not cut", rb.Reason)
	}
	one := f.CLI(t, "rollout", "history", "deployment/"+name, "--revision", "2")
	m := regexp.MustCompile(`(?m)^Reason:\s+(.*)$`).FindStringSubmatch(one)
	if m == nil || strings.TrimSpace(m[1]) != rb.Reason || !regexp.MustCompile(`(?m)^Outcome:\s+Failed$`).MatchString(one) {
		t.Errorf("rollout history --revision 2 does not show the whole reason %q:\n%s", rb.Reason, one)
	}

	out, errOut, err := f.RunCLI(t, "", "rollout", "status", "deployment/"+name)
	if err == nil || !strings.Contains(out, "revision 2 rolled back at step 2 of 2: revision 3 (the template of revision 1) runs") ||
		!strings.Contains(errOut, "revision 2 was rolled back: "+rb.Reason+"; revision 3, the template of revision 1, is current") {
		t.Errorf("rollout status after the automatic rollback: err %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	desc := f.CLI(t, "describe", "deployment", name)
	for _, want := range []string{"Revision:", "3 (last good 3)", "Rolled Back From:", "revision 2 at step 2 of 2", "RolloutRolledBack"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe lacks %q:\n%s", want, desc)
		}
	}
}

func e2eSameApplySecret(t *testing.T, f *Fleet) {
	devs := f.Devices()
	// Several rounds, and unused ConfigMaps between the Deployment and
	// its Secret: the watch hands a transaction's events over one by one,
	// so the window in which a pass sees the Deployment without the
	// Secret is short.
	const fillers = 30
	for i := range 3 {
		name := fmt.Sprintf("e2e-same-%d", i)
		value := "same-" + randomHex(t, 8)
		f.deleteOnCleanup(t, name)
		var filler strings.Builder
		cms := []string{name + "-cfg"}
		for j := range fillers {
			fmt.Fprintf(&filler, "---\napiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: %s-fill-%d}\ndata: {N: \"%d\"}\n", name, j, j)
			cms = append(cms, fmt.Sprintf("%s-fill-%d", name, j))
		}
		t.Cleanup(func() {
			for _, args := range [][]string{{"delete", "secret", name + "-creds"}, append([]string{"delete", "configmap"}, cms...)} {
				if _, errOut, err := f.RunCLI(t, "", append(args, "--ignore-not-found")...); err != nil {
					t.Errorf("fleet %s: %v %s", strings.Join(args, " "), err, errOut)
				}
			}
		})
		manifest := `apiVersion: fleet/v1
kind: Deployment
metadata: {name: ` + name + `}
spec:
  selector: {matchLabels: {agent: "yes"}}
  template:
    spec:
      containers:
      - name: app
        image: ` + f.Image + `
        args: [sleep, forever]
        env:
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: ` + name + `-creds, key: token}}
        envFrom:
        - configMapRef: {name: ` + name + `-cfg}
` + filler.String() + `---
apiVersion: fleet/v1
kind: Secret
metadata: {name: ` + name + `-creds}
stringData: {token: ` + value + `}
---
apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: ` + name + `-cfg}
data: {MODE: fast}
`
		var seen []string // CreateContainerConfigError in a status the hub received
		f.Apply(t, manifest)
		f.AwaitDevices(t, e2eConverge, name+" running", func(d schema.Device) bool {
			if d.Status == nil {
				return false
			}
			for _, p := range d.Status.Pods {
				if p.Name != name {
					continue
				}
				for _, c := range p.Containers {
					if c.Reason == "CreateContainerConfigError" {
						seen = append(seen, d.Metadata.Name+": "+p.Message)
					}
				}
				if Converged(d) && p.Ready {
					return true
				}
			}
			return false
		}, devs...)
		for _, d := range devs {
			c := f.AwaitContainerRunning(t, d, name)
			if env := environ(t, c.PID); env["TOKEN"] != value || env["MODE"] != "fast" {
				t.Errorf("%s: %s runs with TOKEN %q MODE %q", d, name, env["TOKEN"], env["MODE"])
			}
			// The agent's events arrive in order: once its Started event
			// for the pod is at the hub, any config error before it is.
			evs := awaitDeviceEvent(t, f, d, func(e schema.Event) bool { return e.Pod == name && e.Reason == "Started" })
			for _, e := range evs {
				if e.Pod == name && e.Reason == "CreateContainerConfigError" {
					t.Errorf("%s reported %s for %s applied with its Secret: %s", d, e.Reason, name, e.Message)
				}
			}
		}
		if len(seen) > 0 {
			t.Errorf("%s: statuses the hub received report CreateContainerConfigError: %v", name, seen)
		}
	}
}

// awaitDeviceEvent polls the hub's events of a device until one satisfies
// cond, and returns them all.
func awaitDeviceEvent(t *testing.T, f *Fleet, device string, cond func(schema.Event) bool) []schema.Event {
	t.Helper()
	deadline := time.Now().Add(e2eConverge)
	for {
		var evs schema.EventList
		f.Get(t, "/v1/devices/"+device+"/events", &evs)
		if slices.ContainsFunc(evs.Items, cond) {
			return evs.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no such event at the hub within %v: %+v", device, e2eConverge, evs.Items)
		}
		time.Sleep(pollEvery) // poll interval
	}
}
