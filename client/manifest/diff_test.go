package manifest

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestDiff(t *testing.T) {
	objs, err := Decode([]Source{{Name: "web.yaml", Data: []byte(web + "---\n" + dev)}})
	if err != nil {
		t.Fatal(err)
	}
	desired, desiredDev := objs[0], objs[1]

	// A new object is all added.
	d, err := Diff(nil, desired)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "--- /dev/null\n+++ deployment/web (web.yaml)\n@@ -0,0 +1,") || strings.Contains(d, "\n ") || strings.Contains(d, "\n-") {
		t.Fatalf("new object diff:\n%s", d)
	}

	// The live object as the hub stores it: hub fields do not show.
	live := *desired.Object.(*schema.Deployment)
	live.Metadata.UID, live.Metadata.Generation, live.Metadata.ResourceVersion = "u", 4, "99"
	live.Status = &schema.DeploymentStatus{Targeted: 3}
	if d, _ := Diff(&live, desired); d != "" {
		t.Fatalf("hub-set fields show in the diff:\n%s", d)
	}
	// A device's fleet/ labels, set by the hub, do not show either.
	liveDev := *desiredDev.Object.(*schema.Device)
	liveDev.Metadata.Labels = map[string]string{"site": "lab", "fleet/device": "pi-1", "fleet/arch": "arm64"}
	if d, _ := Diff(&liveDev, desiredDev); d != "" {
		t.Fatalf("hub labels show in the diff:\n%s", d)
	}

	// A changed image shows as one changed line.
	live.Spec.Template.Spec.Containers = []schema.Container{live.Spec.Template.Spec.Containers[0]}
	live.Spec.Template.Spec.Containers[0].Image = "nginx:1.24"
	d, _ = Diff(&live, desired)
	if !strings.Contains(d, "-      - image: nginx:1.24\n+      - image: nginx:1.25\n") || !strings.HasPrefix(d, "--- deployment/web (live)\n+++ deployment/web (web.yaml)\n") {
		t.Fatalf("image diff:\n%s", d)
	}
}
