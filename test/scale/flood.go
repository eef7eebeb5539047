package main

// The flood phase (issue 45): the hub's desired states now credit a
// device's publish bucket, so that a device answering a burst of its
// hub's changes is no longer cut off. This phase shows the limiter still
// does its job: one extra device account publishes retained statuses at
// floodFactor times the embedded broker's publish limit while the
// single-change probe goes on changing. The broker must cut the flooder
// off (about burst / (rate − limit) after it starts, and again soon after
// each reconnect: its bucket outlives the connection), and nothing else
// in the fleet may reconnect meanwhile.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

const (
	phaseFlood = "flood"
	// floodDevice is the flooder's account. It carries no scale label, so
	// the suite's lists (and the deployments) never count it.
	floodDevice = "scale-flood"
	// floodFactor: how many times its publish limit the flooder sends.
	floodFactor = 10
	// floodReconnectDelay: how long the flooder waits before it connects
	// again, the real agent's shortest backoff.
	floodReconnectDelay = time.Second
	// cutOffCounter is the hub's count of publish-rate cut-offs (procs.go
	// scrapes it as this name).
	cutOffCounter = "cut_off_publish_rate"
)

// FloodFigures are the flood phase's own figures.
type FloodFigures struct {
	Device string `json:"device"`
	// LimitBurst and LimitPerSecond: the broker's publish limit
	// (broker.DefaultPublishRate); RatePerSecond: what the flooder aimed
	// at, floodFactor times the limit.
	LimitBurst     float64 `json:"limit_burst"`
	LimitPerSecond float64 `json:"limit_per_second"`
	RatePerSecond  float64 `json:"rate_per_second"`
	// WindowS: how long the flood lasted.
	WindowS float64 `json:"window_s"`
	// Sent: publishes written; Acked: those the broker acknowledged
	// (PUBACK), i.e. accepted; AcceptedPerSecond = Acked / WindowS.
	Sent              int64   `json:"sent"`
	Acked             int64   `json:"acked"`
	AcceptedPerSecond float64 `json:"accepted_per_second"`
	// Connects: sessions the flooder opened; CutOffs: those the broker
	// closed under it; HubCutOffs: what the hub's
	// fleet_mqtt_clients_cut_off_total{reason="publish_rate"} counted.
	Connects   int     `json:"connects"`
	CutOffs    int     `json:"cut_offs"`
	HubCutOffs float64 `json:"hub_cut_offs"`
	// FirstCutOffMS: from the flooder's first publish to the broker
	// closing its connection; ExpectedCutOffMS: burst / (rate − limit);
	// AckedBeforeCutOff: what the broker had accepted by then (burst +
	// limit × time, plus the credit of its one desired state).
	FirstCutOffMS     float64 `json:"first_cut_off_ms"`
	ExpectedCutOffMS  float64 `json:"expected_cut_off_ms"`
	AckedBeforeCutOff int64   `json:"acked_before_cut_off"`
	// ProbeChanges: the single-change probe's changes during the flood
	// (their latencies are the phase's p50/p99/max); FleetOnlineMsgs:
	// the hub's msgs_online counter over the phase, every "online" and
	// will message of the fleet (the flooder sends neither): 0 when no
	// device but the flooder was cut off or reconnected.
	ProbeChanges    int     `json:"probe_changes"`
	FleetOnlineMsgs float64 `json:"fleet_online_msgs"`
}

// summary is the flood phase in one line.
func (f *FloodFigures) summary() string {
	cut := "never cut off"
	if f.CutOffs > 0 {
		cut = fmt.Sprintf("first cut off after %.2f s (expected %.2f s) with %d publishes accepted", f.FirstCutOffMS/1000, f.ExpectedCutOffMS/1000, f.AckedBeforeCutOff)
	}
	return fmt.Sprintf("%s sent %d publishes at %.0f/s (limit %.0f, then %.0f/s) for %.0f s: %s; %d cut-offs in %d connections (hub counted %.0f), %.1f accepted a second; the probe changed %d times meanwhile, the fleet sent %.0f online messages",
		f.Device, f.Sent, f.RatePerSecond, f.LimitBurst, f.LimitPerSecond, f.WindowS, cut, f.CutOffs, f.Connects, f.HubCutOffs, f.AcceptedPerSecond, f.ProbeChanges, f.FleetOnlineMsgs)
}

// floodOK says the limiter did its job: the flooder was cut off (the
// hub agreeing), nothing else reconnected.
func floodOK(f *FloodFigures) bool {
	return f.CutOffs > 0 && f.HubCutOffs > 0 && f.FleetOnlineMsgs == 0
}

// flood runs the phase: the flooder for -flood-window beside the probe's
// changes, paced to cover the window.
func (s *suite) flood(ctx context.Context) Result {
	r := s.result(phaseFlood)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	window := s.o.FloodWindow
	ctx, cancel := context.WithTimeout(ctx, s.deadline(30*time.Second+2*window, 0))
	defer cancel()
	fl, err := s.newFlooder(ctx)
	if err != nil {
		return fail(err)
	}
	counters, _ := s.hub.counters(ctx)
	cpu := s.cpuStart()
	floodDone := make(chan error, 1)
	go func() { floodDone <- fl.run(ctx, window) }()
	lat, perr := s.floodProbe(ctx, time.Now().Add(window), window/time.Duration(max(s.o.Changes, 1)))
	ferr := <-floodDone
	s.cpuStop(cpu, &r, false)
	s.countersStop(ctx, counters, &r)
	r.fill(lat)
	f := fl.figures(window)
	f.ProbeChanges = len(lat)
	f.HubCutOffs = r.HubCounters[cutOffCounter]
	f.FleetOnlineMsgs = r.HubCounters["msgs_online"]
	r.Flood = &f
	r.WallMS = ms(window)
	if err := errors.Join(perr, ferr); err != nil {
		return fail(err)
	}
	r.Target = fmt.Sprintf("flooder at %d× its limit cut off, no other device reconnects", floodFactor)
	r.OK = floodOK(&f)
	return r
}

// newFlooder registers the flooder's account and prepares its client.
func (s *suite) newFlooder(ctx context.Context) (*flooder, error) {
	res, err := s.hub.Client.RegisterDevices(ctx, []schema.DeviceBatchItem{{Name: floodDevice}})
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", floodDevice, err)
	}
	if len(res.Items) != 1 || res.Items[0].Token == "" {
		return nil, fmt.Errorf("register %s: no token in the answer", floodDevice)
	}
	u, err := url.Parse(s.brokerURL())
	if err != nil {
		return nil, err
	}
	limit := broker.DefaultPublishRate
	return &flooder{
		addr: u.Host, name: floodDevice, token: res.Items[0].Token,
		topic: s.topics.Device(floodDevice, schema.TopicStatus),
		limit: limit, rate: floodFactor * limit.PerSecond,
	}, nil
}

// floodProbe changes the probe's deployment until the flood ends (at
// most -changes times, one every spacing at most), and returns each
// change's latency, apply to converged status.
func (s *suite) floodProbe(ctx context.Context, until time.Time, spacing time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	for i := 0; i < s.o.Changes && time.Now().Before(until); i++ {
		next := time.Now().Add(spacing)
		dep := deployment(probeDeployment, map[string]string{schema.LabelDevice: s.names[0]},
			schema.EnvVar{Name: "CHANGE", Value: "flood-" + strconv.Itoa(i)})
		hash := podHash(dep)
		body, err := manifest(dep)
		if err != nil {
			return lat, err
		}
		w := s.mon.start(0, false, func(st *statusLite) bool { return st.ready(probeDeployment, hash) })
		if _, err := s.hub.Client.Apply(ctx, body, false); err != nil {
			return lat, fmt.Errorf("probe change %d: apply: %w", i, err)
		}
		s.mon.setOrigin(w, time.Now())
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second*time.Duration(s.o.DeadlineScale))
		l, _, err := s.mon.wait(wctx, w)
		wcancel()
		if err != nil {
			return lat, fmt.Errorf("probe change %d during the flood: %s did not report it: %w", i, s.names[0], err)
		}
		lat = append(lat, l[0])
		// Pacing, not synchronisation: the changes spread over the flood.
		if err := sleepUntil(ctx, next); err != nil {
			return lat, err
		}
	}
	return lat, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// flooder is one device account publishing too fast: MQTT 3.1.1 over its
// own TCP connection (paho's packet codec, as the lite agents), no will
// and no "online" message, so that the hub's online counter stays the
// rest of the fleet's.
type flooder struct {
	addr, name, token, topic string
	limit                    ratelimit.Rate
	rate                     float64

	sent, acked atomic.Int64
	// Written by run only, read after it returned.
	connects, cutOffs int
	start             time.Time // the first publish
	firstCut          time.Duration
	ackedBeforeCut    int64
}

// run floods for window: it connects, publishes at f.rate until the
// broker closes the connection, waits floodReconnectDelay, and again.
func (f *flooder) run(ctx context.Context, window time.Duration) error {
	end := time.Now().Add(window)
	var last error
	for time.Now().Before(end) {
		lost, err := f.session(ctx, end)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			last = err // a refused or failed connect: try again
		}
		if lost {
			f.cutOffs++
			if f.firstCut == 0 {
				f.firstCut = time.Since(f.start)
				f.ackedBeforeCut = f.acked.Load()
			}
		}
		again := time.Now().Add(floodReconnectDelay)
		if again.After(end) {
			again = end
		}
		if err := sleepUntil(ctx, again); err != nil {
			return err
		}
	}
	if f.connects == 0 {
		return fmt.Errorf("flooder never connected: %w", last)
	}
	return nil
}

// session is one connection: lost says the broker closed it.
func (f *flooder) session(ctx context.Context, end time.Time) (lost bool, err error) {
	conn, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if err := f.handshake(conn, r); err != nil {
		return false, err
	}
	f.connects++
	if f.start.IsZero() {
		f.start = time.Now()
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for {
			cp, err := packets.ReadPacket(r)
			if err != nil {
				return
			}
			if _, ok := cp.(*packets.PubackPacket); ok {
				f.acked.Add(1)
			}
		}
	}()
	w := bufio.NewWriter(conn)
	began, sent := time.Now(), int64(0)
	tick := time.NewTicker(time.Duration(float64(time.Second) / f.rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-closed:
			return true, nil
		case now := <-tick.C:
			if !now.Before(end) {
				_ = packets.NewControlPacket(packets.Disconnect).Write(w)
				_ = w.Flush()
				return false, nil
			}
			// What is owed since the session began: a late tick sends
			// more, so the rate holds on a loaded machine.
			owed := int64(now.Sub(began).Seconds() * f.rate)
			n := owed - sent
			for ; sent < owed; sent++ {
				if err := f.publish(w, uint16(sent%65535)+1); err != nil {
					break
				}
			}
			_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := w.Flush(); err != nil {
				<-closed // the broker closed it under the write
				return true, nil
			}
			f.sent.Add(n)
		}
	}
}

func (f *flooder) handshake(conn net.Conn, r *bufio.Reader) error {
	c := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	c.ProtocolName, c.ProtocolVersion = "MQTT", 4
	c.CleanSession = true
	c.ClientIdentifier = f.name
	c.UsernameFlag, c.Username = true, f.name
	c.PasswordFlag, c.Password = true, []byte(f.token)
	c.Keepalive = 60
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if err := c.Write(conn); err != nil {
		return err
	}
	return hollow.ReadConnack(r)
}

// publish writes one retained status, each with its own time: a device
// reporting in a loop, every message new to the hub.
func (f *flooder) publish(w io.Writer, id uint16) error {
	st := schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   f.name, Time: time.Now().UTC(), Pods: []schema.PodStatus{},
		Agent: schema.AgentInfo{Version: "scale-flood", OS: goruntime.GOOS, Arch: goruntime.GOARCH},
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return err
	}
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Payload, p.Qos, p.Retain, p.MessageID = f.topic, payload, 1, true, id
	return p.Write(w)
}

// figures are what the flooder saw over window.
func (f *flooder) figures(window time.Duration) FloodFigures {
	fig := FloodFigures{
		Device: f.name, LimitBurst: f.limit.Burst, LimitPerSecond: f.limit.PerSecond, RatePerSecond: f.rate,
		WindowS: window.Seconds(), Sent: f.sent.Load(), Acked: f.acked.Load(),
		Connects: f.connects, CutOffs: f.cutOffs, AckedBeforeCutOff: f.ackedBeforeCut,
		FirstCutOffMS: ms(f.firstCut),
	}
	if over := f.rate - f.limit.PerSecond; over > 0 {
		fig.ExpectedCutOffMS = math.Round(float64(f.limit.Burst)/over*1e4) / 10
	}
	if window > 0 {
		fig.AcceptedPerSecond = math.Round(float64(fig.Acked)/window.Seconds()*10) / 10
	}
	return fig
}
