package reconcile

import (
	"fmt"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// ContainerSpec turns a pod's container into what the runtime creates:
// env as KEY=VALUE, limits parsed with schema.ParseMemory / ParseCPU.
func ContainerSpec(k state.Key, id string, c schema.Container, logPath string) (runtime.ContainerSpec, error) {
	spec := runtime.ContainerSpec{
		ID:         id,
		Pod:        k.Pod,
		Name:       k.Container,
		PodHash:    k.Hash,
		Image:      c.Image,
		PullPolicy: c.ImagePullPolicy,
		Command:    c.Command,
		Args:       c.Args,
		WorkingDir: c.WorkingDir,
		Mounts:     c.Mounts,
		LogPath:    logPath,
	}
	if spec.PullPolicy == "" {
		spec.PullPolicy = schema.PullIfNotPresent
	}
	for _, e := range c.Env {
		spec.Env = append(spec.Env, e.Name+"="+e.Value)
	}
	if q := c.Resources.Limits.Memory; q != "" {
		n, err := schema.ParseMemory(q)
		if err != nil {
			return spec, fmt.Errorf("container %s: memory limit: %w", k.Container, err)
		}
		spec.MemoryLimitBytes = n
	}
	if q := c.Resources.Limits.CPU; q != "" {
		n, err := schema.ParseCPU(q)
		if err != nil {
			return spec, fmt.Errorf("container %s: cpu limit: %w", k.Container, err)
		}
		spec.CPUMillis = n
	}
	return spec, nil
}
