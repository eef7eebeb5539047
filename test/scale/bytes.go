package main

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/session"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// BytesFigures is the bytes phase's result: what a sample of the agents
// exchanged with the broker, both directions, measured on the devices'
// side of a proxy (wireProxy). "Wire" figures add 52 bytes of IPv4 and
// TCP headers to every segment the kernel counted on those sockets,
// ACKs included; "payload" figures are the MQTT bytes alone. The suite
// runs MQTT without TLS: TLSPerDayBytes adds TLS 1.3's 22 bytes of
// record overhead to every MQTT packet of the idle day (a record per
// packet, as the agent writes them), the figure for a device on mqtts://.
type BytesFigures struct {
	// Devices is the sample's size.
	Devices int `json:"devices"`
	// WindowS is the idle window the per-day figures are extrapolated
	// from; KeepAliveS and ResyncS are the agents' settings in it.
	WindowS    float64 `json:"window_s"`
	KeepAliveS float64 `json:"keepalive_s"`
	ResyncS    float64 `json:"resync_s"`
	// IdleWirePerDay: bytes per idle device per day, both directions,
	// headers included (the target: ≤ 256 KiB). Up is device → broker.
	IdleWirePerDay     float64 `json:"idle_wire_per_day"`
	IdleUpWirePerDay   float64 `json:"idle_up_wire_per_day"`
	IdleDownWirePerDay float64 `json:"idle_down_wire_per_day"`
	IdlePayloadPerDay  float64 `json:"idle_payload_per_day"`
	TLSPerDayBytes     float64 `json:"idle_tls_wire_per_day"`
	// IdleSegmentsPerDay: TCP segments per device per day, both ways.
	IdleSegmentsPerDay float64 `json:"idle_segments_per_day"`
	// IdlePackets: MQTT packets per device per day, by direction and type
	// ("up PINGREQ"). An idle device should show pings only.
	IdlePackets map[string]float64 `json:"idle_packets_per_day"`
	// ChangeWire and ChangePayload: bytes per device-change (the converge
	// phase: desired state down, status and events up, their
	// acknowledgements), both directions; ChangePackets by type.
	ChangeWire     float64            `json:"change_wire"`
	ChangeUpWire   float64            `json:"change_up_wire"`
	ChangeDownWire float64            `json:"change_down_wire"`
	ChangePayload  float64            `json:"change_payload"`
	ChangePackets  map[string]float64 `json:"change_packets,omitempty"`
	// Reconnects: connections opened through the proxy during the
	// window (0 when the sample stayed connected).
	Reconnects int64 `json:"reconnects"`
}

// idleBudget is issue 31's target for an idle device: 256 KiB a day,
// both directions, headers included.
const idleBudget = 256 << 10

// tlsRecordOverhead: a TLS 1.3 record's header (5), content type (1)
// and AEAD tag (16).
const tlsRecordOverhead = 22

// startWire starts the byte-counting proxy in front of the broker and
// routes a sample of the devices through it (never devices[0], the
// single-change probe).
func (s *suite) startWire(cfg *hollow.Config) error {
	// The sample is the last devices: their broker (in a bridged run,
	// the last site's).
	target := cfg.Broker
	if last := cfg.Devices[len(cfg.Devices)-1]; last.Broker != "" {
		target = last.Broker
	}
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	p, err := startWireProxy(u.Host)
	if err != nil {
		return fmt.Errorf("byte-counting proxy: %w", err)
	}
	s.wire = p
	n := min(s.o.BytesSample, len(cfg.Devices)-1)
	if len(cfg.Devices) == 1 {
		n = 1
	}
	devices := append([]hollow.Device(nil), cfg.Devices...)
	for i := len(devices) - n; i < len(devices); i++ {
		devices[i].Broker = p.URL()
	}
	cfg.Devices, s.wireSample = devices, n
	return nil
}

// wireSnapshot is the proxy's count so far (zero without a proxy).
func (s *suite) wireSnapshot() wireCount {
	if s.wire == nil {
		return wireCount{}
	}
	return s.wire.snapshot()
}

// wireChangeDone records what the sample exchanged since before, once
// the last acknowledgements are through: the count must hold still for
// half a second (at most 5 s).
func (s *suite) wireChangeDone(ctx context.Context, before wireCount) {
	if s.wire == nil {
		return
	}
	last := s.wire.snapshot()
	stable := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(stable) < 500*time.Millisecond && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if now := s.wire.snapshot(); now.UpBytes != last.UpBytes || now.DownBytes != last.DownBytes {
			last, stable = now, time.Now()
		}
	}
	d := last.sub(before)
	s.wireChange = &d
}

// bytes is the bytes phase: the converged fleet idles for -idle-window
// with the agents' real keepalive and resync; the proxy's count over the
// window, per sampled device, extrapolated to a day; and the converge
// phase's count per device-change. The hub's CPU over the window is its
// idle cost.
func (s *suite) bytes(ctx context.Context) Result {
	r := s.result(phaseBytes)
	r.Target = fmt.Sprintf("idle ≤ %d KiB/device/day", idleBudget>>10)
	if s.wire == nil || s.wireSample == 0 {
		r.Error = "no byte-counting proxy (the bytes phase was not selected when the agents started)"
		return r
	}
	keepalive := s.o.AgentKeepAlive
	if keepalive == 0 {
		keepalive = session.DefaultKeepAlive
	}
	f := &BytesFigures{Devices: s.wireSample, WindowS: s.o.IdleWindow.Seconds(), KeepAliveS: keepalive.Seconds(), ResyncS: (30 * time.Second).Seconds()}
	r.Bytes = f
	s.profileStart(ctx, phaseBytes)
	defer s.profileStop(ctx)
	cpu := s.cpuStart()
	start := s.wire.snapshot()
	t0 := time.Now()
	t := time.NewTimer(s.o.IdleWindow)
	select {
	case <-ctx.Done():
		t.Stop()
		r.Error = ctx.Err().Error()
		return r
	case <-t.C:
	}
	end := s.wire.snapshot()
	window := time.Since(t0)
	s.cpuStop(cpu, &r, false)
	d := end.sub(start)
	perDay := 24 * time.Hour.Seconds() / window.Seconds() / float64(s.wireSample)
	f.WindowS = window.Seconds()
	f.IdleUpWirePerDay = float64(d.UpBytes+tcpIPHeader*d.SegsIn) * perDay
	f.IdleDownWirePerDay = float64(d.DownBytes+tcpIPHeader*d.SegsOut) * perDay
	f.IdleWirePerDay = float64(d.wire()) * perDay
	f.IdlePayloadPerDay = float64(d.UpBytes+d.DownBytes) * perDay
	f.IdleSegmentsPerDay = float64(d.SegsIn+d.SegsOut) * perDay
	f.IdlePackets = map[string]float64{}
	var packets int64
	for k, v := range d.Packets {
		f.IdlePackets[k] = float64(v) * perDay
		packets += v
	}
	f.TLSPerDayBytes = f.IdleWirePerDay + float64(packets*tlsRecordOverhead)*perDay
	f.Reconnects = d.Conns
	if c := s.wireChange; c != nil {
		n := float64(s.wireSample)
		f.ChangeUpWire = float64(c.UpBytes+tcpIPHeader*c.SegsIn) / n
		f.ChangeDownWire = float64(c.DownBytes+tcpIPHeader*c.SegsOut) / n
		f.ChangeWire = float64(c.wire()) / n
		f.ChangePayload = float64(c.UpBytes+c.DownBytes) / n
		f.ChangePackets = map[string]float64{}
		for k, v := range c.Packets {
			f.ChangePackets[k] = float64(v) / n
		}
	}
	if window < 2*keepalive {
		s.log.Warn("bytes: the idle window is shorter than two keepalives: the per-day figure is rough", "window", window, "keepalive", keepalive)
	}
	r.OK = f.IdleWirePerDay <= idleBudget
	return r
}

// summary is the bytes phase in one line.
func (f *BytesFigures) summary() string {
	return fmt.Sprintf("idle device %.1f KiB/day on the wire (%.1f KiB up, %.1f KiB down; %.1f KiB over TLS; %.1f KiB of MQTT payload; %.0f segments), %s; one change %.0f bytes on the wire (%.0f up, %.0f down); %d devices sampled for %.0f s, keepalive %.0f s",
		f.IdleWirePerDay/1024, f.IdleUpWirePerDay/1024, f.IdleDownWirePerDay/1024, f.TLSPerDayBytes/1024, f.IdlePayloadPerDay/1024,
		f.IdleSegmentsPerDay, f.idlePacketTypes(), f.ChangeWire, f.ChangeUpWire, f.ChangeDownWire, f.Devices, f.WindowS, f.KeepAliveS)
}

// idlePacketTypes lists the MQTT packet types of an idle window, sorted
// ("up PINGREQ 720/day, down PINGRESP 720/day").
func (f *BytesFigures) idlePacketTypes() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f.IdlePackets)) {
		parts = append(parts, fmt.Sprintf("%s %.0f/day", k, f.IdlePackets[k]))
	}
	return strings.Join(parts, ", ")
}
