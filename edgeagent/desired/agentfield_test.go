package desired

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestAdmitAgentField: a signed desired state that carries the agent
// field an AgentRollout adds, and members this agent does not know (as
// an older agent sees the agent field), is accepted, its pods intact: the
// agent decodes desired state leniently and verifies the signature over
// the bytes as sent, so a newer hub's additions never make it refuse.
func TestAdmitAgentField(t *testing.T) {
	k := signingKey(t)
	b, err := json.Marshal(schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   "dev1", Generation: 6, Store: "s1",
		Pods:  []schema.Pod{{Name: "web", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: "nginx"}}}}},
		Agent: &schema.DesiredAgent{Version: "v1.4.0", Image: "registry.example/fleet/agent:v1.4.0", Digest: "sha256:" + string(bytes.Repeat([]byte("ab"), 32)), Rollout: "fleet"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A member from a release after this one.
	future := append([]byte(`{"agentTrial":{"deadlineSeconds":120},`), b[1:]...)
	for _, tt := range []struct {
		name      string
		canonical []byte
	}{
		{"agent field", b},
		{"agent field and an unknown member", future},
	} {
		t.Run(tt.name, func(t *testing.T) {
			signed, err := schema.SignDesiredState(tt.canonical, k, nil)
			if err != nil {
				t.Fatal(err)
			}
			ad, _, _ := newAdmission(t, pubKey(k))
			v := ad.Admit(signed)
			if v.Outcome != Accepted {
				t.Fatalf("outcome %v (%v), want Accepted", v.Outcome, v.Err)
			}
			if len(v.State.Pods) != 1 || v.State.Pods[0].Name != "web" {
				t.Errorf("pods %+v, want the one pod web", v.State.Pods)
			}
			if v.State.Agent == nil || v.State.Agent.Version != "v1.4.0" {
				t.Errorf("agent %+v, want version v1.4.0", v.State.Agent)
			}
		})
	}
}
