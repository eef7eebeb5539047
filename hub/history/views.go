package history

// The answers of the history routes: columns of equal length, one row per
// sample, oldest first, as a chart takes them. Times are unix seconds.

// Online is the devices' online and offline counts over the window: the
// answer of GET /v1/dashboard/history/online.
type Online struct {
	// IntervalSeconds is the width of one sample; WindowSeconds how far
	// back the series may reach.
	IntervalSeconds float64 `json:"intervalSeconds"`
	WindowSeconds   float64 `json:"windowSeconds"`
	// Time is the start of each sample's interval (of the first, the
	// time the hub started sampling, if later).
	Time []float64 `json:"time"`
	// Online and Offline are the last counts seen in the interval
	// (offline: every registered device not online, never seen and
	// stale ones included, as fleet_devices - fleet_devices_online);
	// MinOnline and MaxOffline the fewest online and the most offline
	// seen in it (a short outage shows there).
	Online     []int32 `json:"online"`
	Offline    []int32 `json:"offline"`
	MinOnline  []int32 `json:"minOnline"`
	MaxOffline []int32 `json:"maxOffline"`
}

// Device is what a device reported over the window: the answer of GET
// /v1/dashboard/history/devices/{name}. A figure the device did not
// report in an interval is null.
type Device struct {
	Device          string    `json:"device"`
	IntervalSeconds float64   `json:"intervalSeconds"`
	WindowSeconds   float64   `json:"windowSeconds"`
	Time            []float64 `json:"time"`
	// MemoryUsedBytes is total minus available memory, DiskUsedBytes
	// total minus free space of the agent's state file system, both
	// kept to the KiB.
	MemoryUsedBytes    []*uint64  `json:"memoryUsedBytes"`
	DiskUsedBytes      []*uint64  `json:"diskUsedBytes"`
	TemperatureCelsius []*float64 `json:"temperatureCelsius"`
	// MemoryTotalBytes and DiskTotalBytes are the latest reported totals
	// (0: never reported).
	MemoryTotalBytes uint64 `json:"memoryTotalBytes"`
	DiskTotalBytes   uint64 `json:"diskTotalBytes"`
}

// Deployment is how a Deployment's rollout moved: one row per change of
// its counts, the answer of GET /v1/dashboard/history/deployments/{name}.
// Step is the rollout's step (from 1) when the counts were taken, Steps
// how many its strategy has; a deployment that is not Staged has one.
// Phase is the Staged rollout's phase (Progressing, Paused, Complete,
// Stopped, RolledBack), "" for a deployment that is not Staged.
type Deployment struct {
	Deployment string    `json:"deployment"`
	MaxSamples int       `json:"maxSamples"`
	Time       []float64 `json:"time"`
	Revision   []int32   `json:"revision"`
	Step       []int16   `json:"step"`
	Steps      []int16   `json:"steps"`
	Phase      []string  `json:"phase"`
	Targeted   []int32   `json:"targeted"`
	Updated    []int32   `json:"updated"`
	Ready      []int32   `json:"ready"`
	Failed     []int32   `json:"failed"`
	Pending    []int32   `json:"pending"`
}

// Online returns the online series.
func (h *History) Online() Online {
	_, oldest := h.bucket()
	h.mu.Lock()
	defer h.mu.Unlock()
	ageOut(&h.online, oldest, func(s *onlineSample) int64 { return s.t })
	n := h.online.len()
	out := Online{
		IntervalSeconds: h.interval.Seconds(), WindowSeconds: h.Window().Seconds(),
		Time: make([]float64, n), Online: make([]int32, n), Offline: make([]int32, n),
		MinOnline: make([]int32, n), MaxOffline: make([]int32, n),
	}
	for i := range n {
		s := h.online.at(i)
		// The first interval starts, at the earliest, when sampling did.
		out.Time[i], out.Online[i], out.Offline[i] = float64(max(s.t, h.started)), s.online, s.offline
		out.MinOnline[i], out.MaxOffline[i] = s.minOnline, s.maxOffline
	}
	return out
}

// Device returns the device's series (empty columns if it has none).
func (h *History) Device(name string) Device {
	_, oldest := h.bucket()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Device{Device: name, IntervalSeconds: h.interval.Seconds(), WindowSeconds: h.Window().Seconds()}
	s := h.devices[name]
	n := 0
	if s != nil {
		ageOut(&s.samples, oldest, func(x *deviceSample) int64 { return int64(x.t) })
		n = s.samples.len()
		out.MemoryTotalBytes, out.DiskTotalBytes = s.memTotal, s.diskTotal
	}
	out.Time = make([]float64, n)
	out.MemoryUsedBytes, out.DiskUsedBytes = make([]*uint64, n), make([]*uint64, n)
	out.TemperatureCelsius = make([]*float64, n)
	for i := range n {
		x := s.samples.at(i)
		out.Time[i] = float64(x.t)
		out.MemoryUsedBytes[i] = bytesOf(x.memUsedKiB)
		out.DiskUsedBytes[i] = bytesOf(x.diskUsedKiB)
		if x.tempDeci != noTemp {
			c := float64(x.tempDeci) / 10
			out.TemperatureCelsius[i] = &c
		}
	}
	return out
}

func bytesOf(k uint32) *uint64 {
	if k == noValue {
		return nil
	}
	b := uint64(k) << 10
	return &b
}

// Deployment returns the Deployment's rollout series (empty columns if
// it has none).
func (h *History) Deployment(name string) Deployment {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Deployment{Deployment: name, MaxSamples: h.rolloutSamples}
	n := 0
	s := h.deployments[name]
	if s != nil {
		n = s.samples.len()
	}
	out.Time, out.Revision = make([]float64, n), make([]int32, n)
	out.Step, out.Steps, out.Phase = make([]int16, n), make([]int16, n), make([]string, n)
	out.Targeted, out.Updated, out.Ready = make([]int32, n), make([]int32, n), make([]int32, n)
	out.Failed, out.Pending = make([]int32, n), make([]int32, n)
	for i := range n {
		x := s.samples.at(i)
		out.Time[i] = float64(x.tMillis) / 1000
		out.Revision[i], out.Step[i], out.Steps[i], out.Phase[i] = x.revision, x.step, x.steps, string(phases[x.phase])
		out.Targeted[i], out.Updated[i], out.Ready[i] = x.targeted, x.updated, x.ready
		out.Failed[i], out.Pending[i] = x.failed, x.pending
	}
	return out
}

// Usage is how much the history holds: what a test checks the bounds
// with, and what an operator may want to know.
type Usage struct {
	Devices, DeviceSamples, DeviceSampleCap int
	Deployments, RolloutSamples             int
	OnlineSamples                           int
	// Bytes is the samples' backing arrays, in bytes.
	Bytes int
}

// Usage counts what the history holds.
func (h *History) Usage() Usage {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := Usage{Devices: len(h.devices), Deployments: len(h.deployments), OnlineSamples: h.online.len()}
	u.Bytes = cap(h.online.buf) * OnlineSampleBytes
	for _, s := range h.devices {
		u.DeviceSamples += s.samples.len()
		u.DeviceSampleCap += cap(s.samples.buf)
	}
	u.Bytes += u.DeviceSampleCap * DeviceSampleBytes
	for _, s := range h.deployments {
		u.RolloutSamples += s.samples.len()
		u.Bytes += cap(s.samples.buf) * RolloutSampleBytes
	}
	return u
}
