package agentplan

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkNext500: one plan of a staged AgentRollout over 500 devices,
// as every full pass makes while the rollout exists.
func BenchmarkNext500(b *testing.B) {
	ar := staged("v1.4.0", "5%", true)
	devs := make([]Device, 500)
	for i := range devs {
		devs[i] = Device{Name: fmt.Sprintf("pi-%03d", i), Online: i%10 != 0, Arch: "arm64", Version: "v1.3.0"}
	}
	p := Next(Input{Rollout: ar, Devices: devs, Now: t0})
	for i := range devs {
		devs[i].Version = "v1.4.0"
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = Next(Input{Rollout: ar, Devices: devs, State: p.State, Now: t0.Add(time.Minute)})
	}
}
