package history

import (
	"math"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options, and the sizes the package doc states.
const (
	// DefaultInterval is the width of one sample of the online and device
	// series.
	DefaultInterval = 5 * time.Minute
	// DefaultSamples is how many samples the online and each device's
	// series keep: 288 × 5 min = 24 h.
	DefaultSamples = 288
	// DefaultRolloutSamples is how many changes each Deployment's series
	// keeps.
	DefaultRolloutSamples = 256
	// DefaultScanInterval is how often a Recorder reads the fleet model.
	DefaultScanInterval = 5 * time.Second

	// OnlineSampleBytes, DeviceSampleBytes and RolloutSampleBytes are the
	// sizes of one sample of each series (the tests check them).
	OnlineSampleBytes  = 24
	DeviceSampleBytes  = 16
	RolloutSampleBytes = 40
	// DeviceBoundBytes is what one device's samples take at most with the
	// default Samples.
	DeviceBoundBytes = DefaultSamples * DeviceSampleBytes
)

// Options configure a History. The zero value works.
type Options struct {
	// Interval is the width of one sample of the online and device
	// series; default DefaultInterval. The series span Interval × Samples.
	Interval time.Duration
	// Samples bounds the online series and each device's; default
	// DefaultSamples.
	Samples int
	// RolloutSamples bounds each Deployment's series; default
	// DefaultRolloutSamples.
	RolloutSamples int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// History is the fleet's recent past, in bounded memory (see the package
// doc for the bounds). Create it with New.
type History struct {
	interval       time.Duration
	samples        int
	rolloutSamples int
	now            func() time.Time

	mu          sync.Mutex
	started     int64 // unix seconds of the first RecordOnline; 0: none yet
	online      ring[onlineSample]
	devices     map[string]*deviceSeries
	deployments map[string]*rolloutSeries
}

// onlineSample is one Interval of the online series: 24 bytes.
type onlineSample struct {
	t                     int64 // start of the interval, unix seconds
	online, offline       int32 // the last counts seen in the interval
	minOnline, maxOffline int32 // the fewest online, the most offline seen in it
}

// deviceSample is one Interval of a device's series: 16 bytes.
type deviceSample struct {
	t           uint32 // start of the interval, unix seconds (good until 2106)
	memUsedKiB  uint32 // noValue: not reported
	diskUsedKiB uint32 // noValue: not reported
	tempDeci    int16  // tenths of °C; noTemp: not reported
	_           uint16
}

const (
	noValue = ^uint32(0)
	noTemp  = math.MinInt16
)

type deviceSeries struct {
	uid                 string
	memTotal, diskTotal uint64 // the latest reported totals
	samples             ring[deviceSample]
	// What the Recorder last recorded from (unix nanoseconds of the
	// status's and the top report's time), and the scan that last saw
	// the device.
	statusAt, topAt int64
	seen            uint64
}

// rolloutSample is one change of a Deployment's rollout: 40 bytes.
type rolloutSample struct {
	tMillis                                   int64
	revision                                  int32
	targeted, updated, ready, failed, pending int32
	step, steps                               int16
	phase                                     uint8
}

type rolloutSeries struct {
	samples ring[rolloutSample]
	seen    uint64
}

// phases number the rollout phases a rolloutSample keeps.
var phases = []schema.RolloutPhase{"", schema.RolloutProgressing, schema.RolloutPaused,
	schema.RolloutComplete, schema.RolloutStopped, schema.RolloutRolledBack}

func phaseIndex(p schema.RolloutPhase) uint8 {
	for i, q := range phases {
		if q == p {
			return uint8(i)
		}
	}
	return 0
}

// New returns an empty history.
func New(opts Options) *History {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Samples <= 0 {
		opts.Samples = DefaultSamples
	}
	if opts.RolloutSamples <= 0 {
		opts.RolloutSamples = DefaultRolloutSamples
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &History{
		interval: opts.Interval, samples: opts.Samples, rolloutSamples: opts.RolloutSamples, now: opts.Now,
		online:      newRing[onlineSample](opts.Samples),
		devices:     map[string]*deviceSeries{},
		deployments: map[string]*rolloutSeries{},
	}
}

// Interval is the width of one sample of the online and device series.
func (h *History) Interval() time.Duration { return h.interval }

// Window is how far back the online and device series reach.
func (h *History) Window() time.Duration { return h.interval * time.Duration(h.samples) }

// bucket is the start of the interval now falls in, and the oldest start
// still inside the window, in unix seconds.
func (h *History) bucket() (start, oldest int64) {
	now := h.now()
	start = now.Truncate(h.interval).Unix()
	return start, now.Add(-h.Window()).Unix()
}

// RecordOnline records the fleet's online and offline counts now.
func (h *History) RecordOnline(online, offline int) {
	on, off := clamp32(online), clamp32(offline)
	t, oldest := h.bucket()
	h.mu.Lock()
	defer h.mu.Unlock()
	ageOut(&h.online, oldest, func(s *onlineSample) int64 { return s.t })
	if h.started == 0 {
		h.started = h.now().Unix()
	}
	if l := h.online.last(); l != nil && l.t == t {
		l.online, l.offline = on, off
		l.minOnline, l.maxOffline = min(l.minOnline, on), max(l.maxOffline, off)
		return
	}
	h.online.push(onlineSample{t: t, online: on, offline: off, minOnline: on, maxOffline: off})
}

// DeviceReport is what a device reported of itself, in a status or a top
// report. Zero totals and a nil temperature mean "not reported".
type DeviceReport struct {
	MemoryTotalBytes, MemoryAvailableBytes uint64
	DiskTotalBytes, DiskFreeBytes          uint64
	TemperatureCelsius                     *float64
}

// RecordDevice records a report of the device with this uid. Reports in
// one Interval make one sample: the latest figure of each kind wins. A
// device of another uid replaces the series.
func (h *History) RecordDevice(name, uid string, rep DeviceReport) {
	t, oldest := h.bucket()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recordDeviceLocked(h.seriesLocked(name, uid), t, oldest, rep)
}

// seriesLocked returns the device's series, a new one if it has none or
// has one of another uid.
func (h *History) seriesLocked(name, uid string) *deviceSeries {
	s := h.devices[name]
	if s == nil || s.uid != uid {
		s = &deviceSeries{uid: uid, samples: newRing[deviceSample](h.samples)}
		h.devices[name] = s
	}
	return s
}

func (h *History) recordDeviceLocked(s *deviceSeries, t, oldest int64, rep DeviceReport) {
	ageOut(&s.samples, oldest, func(x *deviceSample) int64 { return int64(x.t) })
	smp := deviceSample{t: uint32(t), memUsedKiB: noValue, diskUsedKiB: noValue, tempDeci: noTemp}
	if l := s.samples.last(); l != nil && int64(l.t) == t {
		smp = *l
	}
	if rep.MemoryTotalBytes > 0 {
		s.memTotal = rep.MemoryTotalBytes
		smp.memUsedKiB = kib(rep.MemoryTotalBytes - min(rep.MemoryAvailableBytes, rep.MemoryTotalBytes))
	}
	if rep.DiskTotalBytes > 0 {
		s.diskTotal = rep.DiskTotalBytes
		smp.diskUsedKiB = kib(rep.DiskTotalBytes - min(rep.DiskFreeBytes, rep.DiskTotalBytes))
	}
	if c := rep.TemperatureCelsius; c != nil && !math.IsNaN(*c) {
		smp.tempDeci = int16(max(min(math.Round(*c*10), math.MaxInt16), math.MinInt16+1))
	}
	if l := s.samples.last(); l != nil && int64(l.t) == t {
		*l = smp
		return
	}
	s.samples.push(smp)
}

// ForgetDevice drops a device's series.
func (h *History) ForgetDevice(name string) {
	h.mu.Lock()
	delete(h.devices, name)
	h.mu.Unlock()
}

// RecordRollout records a Deployment's aggregated status if its rollout's
// counts changed since the last sample.
func (h *History) RecordRollout(name string, st schema.DeploymentStatus) {
	smp := rolloutSampleOf(st)
	smp.tMillis = h.now().UnixMilli()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.deployments[name]
	if s == nil {
		s = &rolloutSeries{samples: newRing[rolloutSample](h.rolloutSamples)}
		h.deployments[name] = s
	}
	if l := s.samples.last(); l != nil {
		a, b := *l, smp
		a.tMillis, b.tMillis = 0, 0
		if a == b {
			return
		}
	}
	s.samples.push(smp)
}

// rolloutSampleOf takes the counts of a Staged rollout from its rollout
// status, those of the other strategies from the deployment's (one
// step).
func rolloutSampleOf(st schema.DeploymentStatus) rolloutSample {
	if r := st.Rollout; r != nil {
		return rolloutSample{
			revision: clamp32(int(r.Revision)), targeted: clamp32(r.Targeted), updated: clamp32(r.Updated),
			ready: clamp32(r.Ready), failed: clamp32(r.Failed), pending: clamp32(r.Pending),
			step: int16(min(r.Step, math.MaxInt16)), steps: int16(min(r.Steps, math.MaxInt16)), phase: phaseIndex(r.Phase),
		}
	}
	return rolloutSample{
		revision: clamp32(int(st.Revision)), targeted: clamp32(st.Targeted), updated: clamp32(st.Updated),
		ready: clamp32(st.Ready), failed: clamp32(st.Failed), pending: clamp32(st.Pending), step: 1, steps: 1,
	}
}

// ForgetDeployment drops a Deployment's series.
func (h *History) ForgetDeployment(name string) {
	h.mu.Lock()
	delete(h.deployments, name)
	h.mu.Unlock()
}

// ageOut drops the samples older than oldest (they are in time order).
func ageOut[T any](r *ring[T], oldest int64, t func(*T) int64) {
	n := 0
	for n < r.len() && t(r.at(n)) < oldest {
		n++
	}
	r.dropOldest(n)
}

func kib(b uint64) uint32 { return uint32(min(b>>10, uint64(noValue-1))) }

func clamp32(n int) int32 { return int32(max(min(n, math.MaxInt32), math.MinInt32)) }
