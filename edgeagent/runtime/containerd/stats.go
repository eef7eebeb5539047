package containerd

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "github.com/containerd/cgroups/stats/v1"
	v2 "github.com/containerd/cgroups/v2/stats"
	"github.com/containerd/errdefs"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// noLimit: a cgroup memory limit at or above it means none (cgroup v1
// reports "unlimited" as the largest page-aligned int64, v2 as max).
const noLimit = 1 << 62

// Stats implements runtime.Runtime with the task's metrics (containerd's
// Task.Metrics), which the shim reads from the container's cgroup: the
// v1 hierarchy (io.containerd.cgroups.v1.Metrics) or the unified v2 one
// (io.containerd.cgroups.v2.Metrics, Raspberry Pi OS since Bullseye).
// The working set is the usage minus the inactive file pages, as cAdvisor
// and kubectl top count it.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.ContainerStats, error) {
	ctx = r.nsCtx(ctx)
	c, _, err := r.load(ctx, "stats of", id)
	if err != nil {
		return runtime.ContainerStats{}, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return runtime.ContainerStats{}, fmt.Errorf("stats of container %s: no task: %w", id, runtime.ErrNotRunning)
	}
	if err != nil {
		return runtime.ContainerStats{}, fmt.Errorf("stats of container %s: load task: %w", id, err)
	}
	m, err := task.Metrics(ctx)
	if errdefs.IsNotFound(err) {
		return runtime.ContainerStats{}, fmt.Errorf("stats of container %s: %w", id, runtime.ErrNotRunning)
	}
	if err != nil {
		return runtime.ContainerStats{}, fmt.Errorf("stats of container %s: metrics: %w", id, err)
	}
	if m.GetData() == nil {
		return runtime.ContainerStats{}, fmt.Errorf("stats of container %s: metrics carry no data", id)
	}
	st, err := decodeMetrics(m.GetData().GetTypeUrl(), m.GetData().GetValue())
	if err != nil {
		return runtime.ContainerStats{}, fmt.Errorf("stats of container %s: %w", id, err)
	}
	st.Time = time.Now()
	if ts := m.GetTimestamp(); ts != nil {
		st.Time = ts.AsTime()
	}
	return st, nil
}

// decodeMetrics maps a cgroup v1 or v2 metrics message to ContainerStats.
func decodeMetrics(typeURL string, value []byte) (runtime.ContainerStats, error) {
	var st runtime.ContainerStats
	switch {
	case strings.HasSuffix(typeURL, "io.containerd.cgroups.v1.Metrics"):
		var m v1.Metrics
		if err := m.Unmarshal(value); err != nil {
			return st, fmt.Errorf("decode cgroup v1 metrics: %w", err)
		}
		if m.CPU != nil && m.CPU.Usage != nil {
			st.CPUUsageNanos = m.CPU.Usage.Total
		}
		if m.Memory != nil {
			if u := m.Memory.Usage; u != nil {
				st.MemoryBytes = u.Usage
				if u.Limit < noLimit {
					st.MemoryLimitBytes = u.Limit
				}
			}
			st.MemoryWorkingSetBytes = st.MemoryBytes - min(st.MemoryBytes, m.Memory.TotalInactiveFile)
		}
		if m.Pids != nil {
			st.PIDs = m.Pids.Current
		}
	case strings.HasSuffix(typeURL, "io.containerd.cgroups.v2.Metrics"):
		var m v2.Metrics
		if err := m.Unmarshal(value); err != nil {
			return st, fmt.Errorf("decode cgroup v2 metrics: %w", err)
		}
		if m.CPU != nil {
			st.CPUUsageNanos = m.CPU.UsageUsec * 1000
		}
		if m.Memory != nil {
			st.MemoryBytes = m.Memory.Usage
			if m.Memory.UsageLimit < noLimit {
				st.MemoryLimitBytes = m.Memory.UsageLimit
			}
			st.MemoryWorkingSetBytes = st.MemoryBytes - min(st.MemoryBytes, m.Memory.InactiveFile)
		}
		if m.Pids != nil {
			st.PIDs = m.Pids.Current
		}
	default:
		return st, fmt.Errorf("metrics of unknown type %q", typeURL)
	}
	return st, nil
}
