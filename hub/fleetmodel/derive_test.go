package fleetmodel

import (
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestConverged(t *testing.T) {
	desired := &schema.DesiredState{Generation: 4, Store: "s", Pods: []schema.Pod{{Name: "web", Hash: "h"}}}
	job := &schema.DesiredState{Generation: 1, Pods: []schema.Pod{{Name: "job", Hash: "j", Spec: schema.PodSpec{RestartPolicy: schema.RestartNever}}}}
	ready := []schema.PodStatus{{Name: "web", Hash: "h", Phase: schema.PhaseRunning, Ready: true}}
	tests := []struct {
		name    string
		desired *schema.DesiredState
		st      *schema.DeviceStatus
		want    bool
	}{
		{"ready at the generation", desired, &schema.DeviceStatus{ObservedGeneration: 4, Pods: ready}, true},
		{"behind", desired, &schema.DeviceStatus{ObservedGeneration: 3, Pods: ready}, false},
		{"another store", desired, &schema.DeviceStatus{ObservedGeneration: 4, Store: "t", Pods: ready}, false},
		{"failed", desired, &schema.DeviceStatus{ObservedGeneration: 4, Pods: []schema.PodStatus{{Name: "web", Hash: "h", Phase: schema.PhaseFailed}}}, false},
		{"old template", desired, &schema.DeviceStatus{ObservedGeneration: 4, Pods: []schema.PodStatus{{Name: "web", Hash: "g", Ready: true}}}, false},
		{"pod missing", desired, &schema.DeviceStatus{ObservedGeneration: 4}, false},
		{"no report", desired, nil, false},
		{"no report, nothing desired", nil, nil, true},
		{"job finished", job, &schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{{Name: "job", Hash: "j", Phase: schema.PhaseSucceeded}}}, true},
	}
	for _, tt := range tests {
		if got := Converged(tt.desired, tt.st); got != tt.want {
			t.Errorf("%s: Converged = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestObservedInfoStale(t *testing.T) {
	now := time.Unix(1000, 0)
	info := ObservedInfo(nil, nil, false, now.Add(-2*time.Minute), now, time.Minute)
	if !info.Stale || info.Online || info.LastSeen == nil {
		t.Errorf("ObservedInfo = %+v, want stale, offline, last seen set", info)
	}
}
