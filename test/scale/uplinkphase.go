package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// phaseUplink: -topology bridged only (uplinkphase.go).
const phaseUplink = "uplink"

// UplinkFigures is the uplink phase's result.
type UplinkFigures struct {
	// DownMS: how long every site's uplink was cut.
	DownMS float64 `json:"down_ms"`
	// MinConnected: the fewest devices connected to their site broker at
	// any poll while the uplinks were down (of Devices).
	MinConnected int `json:"min_connected"`
	Devices      int `json:"devices"`
	// Reconnects: sessions the devices opened over the phase (lite
	// agents count them; 0 means none dropped).
	Reconnects int64 `json:"reconnects"`
	// AcceptedWhileDown: desired states the devices accepted while cut
	// off (the change was applied on the hub meanwhile: 0 expected).
	AcceptedWhileDown int64 `json:"accepted_while_down"`
}

func (f *UplinkFigures) summary() string {
	return fmt.Sprintf("uplinks down %.1f s: %d of %d devices still connected to their site at the least, %d reconnects, %d desired states reached them meanwhile",
		f.DownMS/1000, f.MinConnected, f.Devices, f.Reconnects, f.AcceptedWhileDown)
}

// uplink cuts every site's uplink for -uplink-down, applies a change to
// every device on the hub meanwhile, and restores them: the devices must
// stay connected to their site brokers throughout, and converge once the
// bridges are back. Latencies are from the restore to each device's
// status showing the new pod ready, as the core (the hub's side) sees it.
func (s *suite) uplink(ctx context.Context) Result {
	r := s.result(phaseUplink)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	if s.bridged == nil || s.bridged.uplinks == nil {
		return fail(fmt.Errorf("the uplink phase needs -topology bridged with -uplink-quickack (its relays are the links it cuts)"))
	}
	ctx, cancel := context.WithTimeout(ctx, s.deadline(90*time.Second+s.o.UplinkDown, 5*time.Millisecond))
	defer cancel()
	before, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	dep := deployment(convergeDeployment, map[string]string{scaleLabel: scaleLabelValue},
		schema.EnvVar{Name: "RUN", Value: "uplink"})
	hash := podHash(dep)
	body, err := manifest(dep)
	if err != nil {
		return fail(err)
	}
	f := &UplinkFigures{Devices: len(s.names), MinConnected: len(s.names)}
	r.Uplink = f
	cpu := s.cpuStart()
	cut := time.Now()
	for _, u := range s.bridged.uplinks {
		u.cut()
	}
	if _, err := s.hub.Client.Apply(ctx, body, false); err != nil {
		s.restoreUplinks()
		return fail(fmt.Errorf("apply while the uplinks are down: %w", err))
	}
	// Polled: the devices are in other processes.
	err = poll(ctx, 250*time.Millisecond, func() (bool, error) {
		st, err := hollowStats(ctx, s.agents)
		if err != nil {
			return false, err
		}
		f.MinConnected = min(f.MinConnected, st.Connected)
		f.AcceptedWhileDown = st.Accepted - before.Accepted
		return time.Since(cut) >= s.o.UplinkDown, nil
	})
	if err != nil {
		s.restoreUplinks()
		return fail(err)
	}
	w := s.mon.start(-1, false, func(st *statusLite) bool { return st.ready(convergeDeployment, hash) })
	restored := time.Now()
	s.restoreUplinks()
	f.DownMS = ms(restored.Sub(cut))
	s.mon.setOrigin(w, restored)
	lat, _, werr := s.mon.wait(ctx, w)
	s.cpuStop(cpu, &r, false)
	r.fill(lat)
	s.dump(phaseUplink, lat)
	r.WallMS = r.MaxMS
	if werr != nil {
		return fail(fmt.Errorf("%d of %d devices converged after the uplinks came back: %w", r.Samples, len(lat), werr))
	}
	s.convergeDep = dep // what the later phases wait for
	after, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	f.Reconnects = after.Connects - before.Connects
	r.RedundantRestarts = after.Starts - before.Starts - len(s.names)
	r.Target = "every device connected throughout, converged after"
	r.OK = f.MinConnected == f.Devices && f.Reconnects == 0 && f.AcceptedWhileDown == 0 && r.Lost == 0
	return r
}

func (s *suite) restoreUplinks() {
	for _, u := range s.bridged.uplinks {
		u.restore()
	}
}
