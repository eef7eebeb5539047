package test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// TestE2ETruthfulStatus: what Fleet shows is what runs, through a real
// fleet-hub and a real fleet-agent on a private containerd.
//
//   - After a device-side fallback (v2, on another image, exits at once
//     three times; the agent runs v1 again by itself), `fleet get pods -o
//     wide`, `fleet describe pod` and the dashboard's JSON show v1's image,
//     Running and ready, and v2 apart as the failed revision; the
//     deployment counts the device failed.
//   - Once the agent process stops, the pod reads Unknown, not ready, with
//     the age of its last report, in get pods, describe pod and the
//     dashboard; its container keeps running.
//
// The dashboard is checked in its JSON (GET /v1/dashboard/devices?pod=)
// and on its deployment page in a real Chromium.
func TestE2ETruthfulStatus(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, Shell: true, Labels: func(int) map[string]string { return e2eAgents }})
	dev := f.Devices()[0]
	const name = "e2e-truth"
	f.deleteOnCleanup(t, name)

	v1 := e2eDep{Name: name}
	f.applyDeps(t, v1)
	f.AwaitRollout(t, name, 1, e2eConverge)
	h1 := f.PodHash(t, name)
	awaitAgentSteady(t, f, dev, name, h1)

	v2 := e2eDep{Name: name, Image: f.ShellImage, Args: []string{"echo", "v2", "exit", "1"}}
	f.applyDeps(t, v2)
	h2 := f.PodHash(t, name)
	if h2 == h1 {
		t.Fatal("v2 has v1's hash")
	}
	f.AwaitDevices(t, e2eConverge, "v2 failed to start, v1 running again", podReported(name, func(p schema.PodStatus) bool {
		return p.Hash == h1 && p.Ready && p.RevisionFailed(h2)
	}), dev)
	f.AwaitContainerRunning(t, dev, name, h1)

	checkFallbackShown(t, f, dev, name, h1, h2)

	// The dashboard's deployment page, in a real Chromium, as a monitor.
	b := startBrowser(t, f.Hub.URL, 1280, 860)
	b.do("open", chromedp.Navigate(b.base+"/"))
	b.login(addMonitor(t, f.Hub, "truth-monitor"))
	b.goTo("#/deployments/" + name)
	row := `tr[data-device="` + dev + `"]`
	b.awaitText(row+" .failed-revision", "Revision "+h2[:8]+" failed", "CrashLoopBackOff", f.ShellImage)
	b.awaitText(row, "Running", f.Image, "Failed, went back")
	b.goTo("#/devices/" + dev)
	podRow := `tr[data-pod="` + name + `"]`
	b.awaitText(podRow, "Running", "Ready", h1[:8], "Revision "+h2[:8]+" failed")

	checkOfflineShown(t, f, dev, name)
	b.awaitText(podRow, "Unknown", "device offline; last report ", "ago: Running, ready", "Revision "+h2[:8]+" failed")
	b.goTo("#/deployments/" + name)
	b.awaitText(row+" .last-report", "device offline; last report ", "ago: Running, ready")
	b.awaitText(row, "Unknown", "Offline")
}

// awaitAgentSteady waits until the agent of dev has recorded pod name's
// revision hash as steady (run 30 s without exiting): only then does it
// go back to it when a new revision fails.
func awaitAgentSteady(t *testing.T, f *Fleet, dev, name, hash string) {
	t.Helper()
	a := f.Agent(t, dev)
	deadline := time.Now().Add(e2eConverge)
	for {
		_, ag, err := state.Inspect(a.StateDir)
		if r := ag.Rollouts[name]; err == nil && r.Steady != nil && r.Steady.Pod.Hash == hash {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: pod %s not steady at %s within %v (%v)", dev, name, hash, e2eConverge, err)
		}
		time.Sleep(pollEvery) // poll interval
	}
}

// dashboardPod returns the dashboard's row of dev for pod name, as the
// deployment page reads it.
func dashboardPod(t *testing.T, f *Fleet, dev, name string) map[string]any {
	t.Helper()
	var page struct {
		Items []struct {
			Name     string         `json:"name"`
			State    string         `json:"state"`
			LastSeen *time.Time     `json:"lastSeen"`
			Pod      map[string]any `json:"pod"`
		} `json:"items"`
	}
	f.Get(t, "/v1/dashboard/devices?pod="+name, &page)
	for _, it := range page.Items {
		if it.Name == dev {
			if it.Pod == nil {
				t.Fatalf("dashboard: no pod %s on %s", name, dev)
			}
			it.Pod["deviceState"] = it.State
			return it.Pod
		}
	}
	t.Fatalf("dashboard: no device %s in %+v", dev, page.Items)
	return nil
}

// awaitDashboardPod polls dashboardPod until cond holds.
func awaitDashboardPod(t *testing.T, f *Fleet, dev, name string, cond func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(e2eConverge)
	for {
		p := dashboardPod(t, f, dev, name)
		if cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard pod %s on %s: %v, not as awaited within %v", name, dev, p, e2eConverge)
		}
		time.Sleep(pollEvery) // poll interval
	}
}

func checkFallbackShown(t *testing.T, f *Fleet, dev, name, h1, h2 string) {
	t.Helper()
	// get pods -o wide: v1's image, 1/1 Running, v2 as FAILED REVISION.
	out := f.CLI(t, "get", "pods", name, "-o", "wide")
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%s +%s +1/1 +Running +\d+ +\S+ +%s +%s \(CrashLoopBackOff\) +revision %s failed to start .*the previous version runs again$`,
		regexp.QuoteMeta(dev), name, regexp.QuoteMeta(f.Image), h2[:8], h2[:8]))
	if !strings.Contains(out, "FAILED REVISION") || !row.MatchString(out) {
		t.Errorf("fleet get pods -o wide after the fallback: want %s 1/1 Running, image %s, failed revision %s:\n%s", dev, f.Image, h2[:8], out)
	}
	if strings.Contains(out, f.ShellImage) {
		t.Errorf("fleet get pods -o wide shows the failed revision's image %s as running:\n%s", f.ShellImage, out)
	}

	// describe pod: Running, ready, v1's revision and image; v2 apart.
	desc := f.CLI(t, "describe", "pod", dev+"/"+name)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Status: +Running$`),
		regexp.MustCompile(`(?m)^Revision: +` + h1[:8] + `$`),
		regexp.MustCompile(`(?m)^Phase: +Running$`),
		regexp.MustCompile(`(?m)^Ready: +true$`),
		regexp.MustCompile(`(?m)^Failed Revision: +` + h2[:8] + ` \(the device went back to the revision above\)$`),
		regexp.MustCompile(`(?m)^  Container: +app \(` + regexp.QuoteMeta(f.ShellImage) + `\)$`),
		regexp.MustCompile(`(?m)^  Reason: +CrashLoopBackOff, exit code 1, 3 attempts$`),
		regexp.MustCompile(`(?m)^    Image: +` + regexp.QuoteMeta(f.Image) + `$`),
		regexp.MustCompile(`(?m)^    State: +running$`),
	} {
		if !want.MatchString(desc) {
			t.Errorf("fleet describe pod %s/%s: no line matching %s in\n%s", dev, name, want, desc)
		}
	}

	// The dashboard's data, once its snapshot has the report.
	p := awaitDashboardPod(t, f, dev, name, func(p map[string]any) bool { return p["failedRevision"] != nil })
	fr, _ := p["failedRevision"].(map[string]any)
	if p["hash"] != h1 || p["desiredHash"] != h2 || p["status"] != "Running" || p["phase"] != "Running" || p["ready"] != true ||
		fmt.Sprint(p["images"]) != "["+f.Image+"]" || fr == nil || fr["hash"] != h2 || fr["reason"] != "CrashLoopBackOff" || fr["image"] != f.ShellImage {
		t.Errorf("dashboard pod after the fallback: %v\nwant hash %s (desired %s), Running, ready, images [%s], failedRevision %s", p, h1, h2, f.Image, h2)
	}

	// The deployment counts the device failed: it did not take v2.
	deadline := time.Now().Add(e2eConverge)
	for {
		st := f.Deployment(t, name).Status
		if st != nil && st.Failed == 1 && st.Ready == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment status after the fallback: %+v; want 1 failed, 0 ready", st)
		}
		time.Sleep(pollEvery) // poll interval
	}
}

func checkOfflineShown(t *testing.T, f *Fleet, dev, name string) {
	t.Helper()
	a := f.Agent(t, dev)
	t.Cleanup(func() {
		if !a.Running() {
			a.Start(t)
			f.AwaitDevices(t, e2eConverge, "online again", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, dev)
		}
	})
	if err := a.Stop(); err != nil {
		t.Fatalf("stop fleet-agent %s: %v", dev, err)
	}
	f.AwaitDevices(t, e2eConverge, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, dev)
	f.AwaitContainerRunning(t, dev, name) // the device keeps running it

	age := `(\d+s|\d+m\d*s?)`
	out := f.CLI(t, "get", "pods", name, "-o", "wide", "--no-headers")
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(dev) + ` +` + name + ` +0/1 +Unknown +.*device offline; last report ` + age + ` ago: Running, 1/1 ready; revision `)
	if !row.MatchString(out) {
		t.Errorf("fleet get pods -o wide with the agent stopped: want 0/1 Unknown, device offline; last report N ago:\n%s", out)
	}
	desc := f.CLI(t, "describe", "pod", dev+"/"+name)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Device: +` + regexp.QuoteMeta(dev) + ` \(offline, last seen ` + age + ` ago\)$`),
		regexp.MustCompile(`(?m)^Status: +Unknown \(device offline; last report ` + age + ` ago: Running, 1/1 ready\)$`),
		regexp.MustCompile(`(?m)^Phase: +Running \(last reported\)$`),
		regexp.MustCompile(`(?m)^Ready: +true \(last reported\)$`),
	} {
		if !want.MatchString(desc) {
			t.Errorf("fleet describe pod with the agent stopped: no line matching %s in\n%s", want, desc)
		}
	}
	// The dashboard's snapshot follows the device within a moment.
	p := awaitDashboardPod(t, f, dev, name, func(p map[string]any) bool { return p["deviceState"] == "offline" })
	if p["status"] != "Unknown" || p["phase"] != "Running" {
		t.Errorf("dashboard pod with the agent stopped: %v; want status Unknown, last reported phase Running", p)
	}
}
