package reconcile

import (
	"testing"
	"testing/synctest"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// TestLogLimitsFromAnnotations: a pod's fleet/log-max-* annotations reach
// the runtime as the container's log limits; without them the runtime's
// defaults apply (zeros).
func TestLogLimitsFromAnnotations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		h.start()
		defer h.stop()
		plain := pod("plain", schema.RestartAlways, "app:1")
		capped := pod("capped", schema.RestartAlways, "app:1")
		capped.Annotations = map[string]string{schema.AnnotationLogMaxSize: "1Mi", schema.AnnotationLogMaxFiles: "3"}
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{plain, capped}})
		cappedID := ContainerID("capped", "c0", schema.PodHash(capped))
		if got := h.state(cappedID); got != runtime.StateRunning {
			t.Fatalf("capped is %s: %+v", got, h.getStatus())
		}
		if s := h.lastCreated(cappedID); s.LogMaxBytes != 1<<20 || s.LogMaxFiles != 3 {
			t.Errorf("capped: log limits %d, %d; want 1 MiB, 3", s.LogMaxBytes, s.LogMaxFiles)
		}
		if s := h.lastCreated(idOf(plain, "c0")); s.LogMaxBytes != 0 || s.LogMaxFiles != 0 {
			t.Errorf("plain: log limits %d, %d; want the runtime's (0, 0)", s.LogMaxBytes, s.LogMaxFiles)
		}
	})
}
