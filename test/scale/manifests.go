package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/fleetmq/fleet/schema"
)

// Labels and names the suite uses.
const (
	scaleLabel      = "fleet-scale"
	scaleLabelValue = "hollow"
	// convergeDeployment targets every device (B2, B4).
	convergeDeployment = "scale"
	// probeDeployment is pinned to the first device (B7).
	probeDeployment = "scale-probe"
	// rolloutDeployment is the Staged deployment of the rollout phase,
	// targeting every device.
	rolloutDeployment = "scale-rollout"
	monitorName       = "scale-monitor"
	hubUsername       = "fleet-hub"
	floorHubUsername  = "scale-floor-hub"
	// storeIDPlaceholder has the length of a hub store ID (a UUID), for
	// the floor's payloads.
	storeIDPlaceholder = "00000000-0000-4000-8000-000000000000"
)

// deviceNames returns n device names of one width.
func deviceNames(n int) []string {
	width := max(5, len(strconv.Itoa(n-1)))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("dev-%0*d", width, i)
	}
	return names
}

// deployment returns a defaulted Deployment running one container; env
// makes each version's spec (and hash) distinct.
func deployment(name string, selector map[string]string, env ...schema.EnvVar) *schema.Deployment {
	d := &schema.Deployment{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
		Metadata: schema.ObjectMeta{Name: name},
		Spec: schema.DeploymentSpec{
			Selector: schema.LabelSelector{MatchLabels: selector},
			Template: schema.PodTemplate{Spec: schema.PodSpec{
				Containers: []schema.Container{{
					Name:  "app",
					Image: "registry.example.com/fleet/scale-app:1.0.0",
					Args:  []string{"--listen", ":8080"},
					Env:   env,
					Resources: schema.Resources{Limits: schema.ResourceList{
						Memory: "64Mi", CPU: "250m",
					}},
				}},
			}},
		},
	}
	schema.Default(d)
	return d
}

// podHash is the hash the hub gives the deployment's pod.
func podHash(d *schema.Deployment) string { return schema.PodSpecHash(d.Spec.Template.Spec) }

// manifest encodes one object for the apply API.
func manifest(o schema.Object) ([]byte, error) { return json.Marshal(o) }

// desiredFor is the DesiredState the hub publishes for d on one device
// (with the hub's store ID replaced by a placeholder of its length).
func desiredFor(d *schema.Deployment, generation int64) schema.DesiredState {
	return schema.DesiredState{
		TypeMeta:   schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Generation: generation,
		Store:      storeIDPlaceholder,
		Pods:       []schema.Pod{{Name: d.Metadata.Name, Spec: d.Spec.Template.Spec, Hash: podHash(d)}},
	}
}

// newSecret returns a random token like the hub's.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
