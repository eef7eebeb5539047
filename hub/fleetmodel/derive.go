package fleetmodel

import (
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Converged reports whether a device's report shows it at its desired
// generation with every desired pod running its spec (ready, or finished
// for pods that are not restarted).
func Converged(desired *schema.DesiredState, st *schema.DeviceStatus) bool {
	if st == nil {
		return desired == nil || len(desired.Pods) == 0 && desired.Generation == 0
	}
	if desired == nil {
		return true
	}
	if st.ObservedGeneration < desired.Generation || (desired.Store != "" && st.Store != "" && st.Store != desired.Store) {
		return false
	}
	for _, want := range desired.Pods {
		ok := false
		for _, got := range st.Pods {
			if got.Name != want.Name {
				continue
			}
			ok = (want.Hash == "" || got.Hash == "" || got.Hash == want.Hash) &&
				(got.Ready || got.Phase == schema.PhaseSucceeded && want.Spec.RestartPolicy != schema.RestartAlways)
			break
		}
		if !ok {
			return false
		}
	}
	return true
}

// ObservedInfo derives the API's view of a device from its desired state,
// its last report and its online flag.
func ObservedInfo(desired *schema.DesiredState, st *schema.DeviceStatus, online bool, lastSeen time.Time, now time.Time, staleAfter time.Duration) *schema.DeviceObservedInfo {
	info := &schema.DeviceObservedInfo{Online: online}
	if desired != nil {
		info.DesiredGeneration = desired.Generation
	}
	if !lastSeen.IsZero() {
		ls := lastSeen.UTC()
		info.LastSeen = &ls
		info.Stale = staleAfter > 0 && now.Sub(lastSeen) > staleAfter
	}
	if st != nil {
		info.ObservedGeneration = st.ObservedGeneration
		agent := st.Agent
		info.Agent = &agent
		info.Node = st.Node
		info.Pods = st.Pods
		info.Message = st.Message
	}
	info.Converged = Converged(desired, st)
	return info
}
