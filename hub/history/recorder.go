package history

import (
	"context"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// Source is what a Recorder reads: the hub's fleet model
// (*fleetmodel.Model).
type Source interface {
	Counts() (devices, online, converged int64)
	Devices(sel schema.LabelSelector) []fleetmodel.DeviceRef
	DeviceState(name, uid string) (*schema.DeviceStatus, bool)
	Top(name, uid string) *schema.TopReport
	DeploymentStatuses() []fleetmodel.NamedDeploymentStatus
}

var _ Source = (*fleetmodel.Model)(nil)

// Recorder fills a History from a Source.
type Recorder struct {
	h     *History
	src   Source
	every time.Duration
	scans uint64
}

// RolloutScanInterval is how often a Recorder reads the deployments'
// statuses: a wave that lasts a second shows. (They are few; reading them
// is a copy of one small map.)
const RolloutScanInterval = time.Second

// NewRecorder returns a recorder that reads src into h every scan
// interval (default DefaultScanInterval, at most h's Interval), and the
// deployments' statuses every RolloutScanInterval.
func NewRecorder(h *History, src Source, scan time.Duration) *Recorder {
	if scan <= 0 {
		scan = DefaultScanInterval
	}
	return &Recorder{h: h, src: src, every: min(scan, h.interval)}
}

// Run scans at once and then on its intervals until ctx is done.
func (r *Recorder) Run(ctx context.Context) error {
	tickEvery := min(r.every, RolloutScanInterval)
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	last := time.Now()
	r.Scan()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			if now.Sub(last) >= r.every-tickEvery/2 {
				last = now
				r.Scan()
			} else {
				r.ScanRollouts()
			}
		}
	}
}

// Scan reads the source once: the online count, every device's new
// reports, every deployment's status; it drops the series of devices and
// deployments that are gone.
func (r *Recorder) Scan() {
	h := r.h
	r.scans++
	scan := r.scans
	devices, online, _ := r.src.Counts()
	h.RecordOnline(int(online), int(max(devices-online, 0)))
	for _, d := range r.src.Devices(schema.LabelSelector{}) {
		st, _ := r.src.DeviceState(d.Name, d.UID)
		top := r.src.Top(d.Name, d.UID)
		r.recordDevice(d, st, top, scan)
	}
	r.ScanRollouts()
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, s := range h.devices {
		if s.seen != scan {
			delete(h.devices, name)
		}
	}
}

// ScanRollouts reads every deployment's status, records those that
// changed and drops the series of deployments that are gone.
func (r *Recorder) ScanRollouts() {
	h := r.h
	statuses := r.src.DeploymentStatuses()
	live := make(map[string]struct{}, len(statuses))
	for _, d := range statuses {
		h.RecordRollout(d.Name, d.Status)
		live[d.Name] = struct{}{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for name := range h.deployments {
		if _, ok := live[name]; !ok {
			delete(h.deployments, name)
		}
	}
}

// recordDevice records what is new in the device's status and top
// report since the last scan.
func (r *Recorder) recordDevice(d fleetmodel.DeviceRef, st *schema.DeviceStatus, top *schema.TopReport, scan uint64) {
	h := r.h
	t, oldest := h.bucket()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seriesLocked(d.Name, d.UID)
	s.seen = scan
	if st != nil && st.Node != nil && st.Time.UnixNano() != s.statusAt {
		s.statusAt = st.Time.UnixNano()
		n := st.Node
		h.recordDeviceLocked(s, t, oldest, DeviceReport{
			MemoryTotalBytes: n.MemoryTotalBytes, MemoryAvailableBytes: n.MemoryAvailBytes,
			DiskTotalBytes: n.DiskTotalBytes, DiskFreeBytes: n.DiskFreeBytes,
			TemperatureCelsius: n.TemperatureCelsius,
		})
	}
	if top != nil && top.Time.UnixNano() != s.topAt {
		s.topAt = top.Time.UnixNano()
		n := top.Node
		rep := DeviceReport{
			MemoryTotalBytes: n.MemoryTotalBytes, MemoryAvailableBytes: n.MemoryAvailableBytes,
			TemperatureCelsius: n.TemperatureCelsius,
		}
		if n.StateDisk != nil {
			rep.DiskTotalBytes, rep.DiskFreeBytes = n.StateDisk.TotalBytes, n.StateDisk.FreeBytes
		}
		h.recordDeviceLocked(s, t, oldest, rep)
	}
}
