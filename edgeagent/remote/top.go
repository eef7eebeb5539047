package remote

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// cpuSample is a container's CPU time at one measurement, for the rate
// of the next.
type cpuSample struct {
	usage uint64
	at    time.Time
}

// top measures the device and its running containers. CPUMillicores is
// the rate since the previous top (nil on the first).
func (s *Server) top(ctx context.Context) (*schema.TopReport, error) {
	rep := &schema.TopReport{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "TopReport"},
		Device:   s.o.Device,
		Time:     s.o.Now().UTC(),
		Node:     s.o.Node(ctx),
	}
	list, err := s.o.Runtime.List(ctx)
	if err != nil {
		return nil, errorf(schema.CodeUnavailable, "list containers on device %s: %v", s.o.Device, err)
	}
	seen := map[string]bool{}
	for _, c := range list {
		if c.State != runtime.StateRunning {
			continue
		}
		st, err := s.o.Runtime.Stats(ctx, c.ID)
		if err != nil {
			s.log.Debug("container stats", "pod", c.Pod, "container", c.Name, "err", err)
			continue
		}
		seen[c.ID] = true
		m := schema.ContainerMetrics{
			Pod: c.Pod, Container: c.Name,
			CPUUsageNanos:         st.CPUUsageNanos,
			MemoryBytes:           st.MemoryBytes,
			MemoryWorkingSetBytes: st.MemoryWorkingSetBytes,
			MemoryLimitBytes:      st.MemoryLimitBytes,
			PIDs:                  st.PIDs,
		}
		s.mu.Lock()
		prev, ok := s.cpuPrev[c.ID]
		s.cpuPrev[c.ID] = cpuSample{st.CPUUsageNanos, st.Time}
		s.mu.Unlock()
		if el := st.Time.Sub(prev.at); ok && el > 0 && st.CPUUsageNanos >= prev.usage {
			mc := int64(float64(st.CPUUsageNanos-prev.usage) / float64(el) * 1000)
			m.CPUMillicores = &mc
		}
		rep.Containers = append(rep.Containers, m)
	}
	s.mu.Lock()
	for id := range s.cpuPrev {
		if !seen[id] {
			delete(s.cpuPrev, id)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(rep.Containers, func(a, b schema.ContainerMetrics) int {
		return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
	})
	return rep, nil
}
