package reconcile

import (
	"fmt"
	"strings"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// ContainerSpec turns a pod's container into what the runtime creates:
// env as KEY=VALUE, limits parsed with schema.ParseMemory / ParseCPU,
// devices and the security context (capability names with CAP_, in upper
// case; "ALL" in drop). It is pure: what needs the pod, the device or the
// desired state's ConfigMaps and Secrets (env valueFrom and envFrom,
// volumes, a device node's presence) is added by the reconciler (see
// workload.go).
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
	for _, d := range c.Devices {
		spec.Devices = append(spec.Devices, runtime.Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
	}
	if sc := c.SecurityContext; sc != nil {
		spec.Privileged = sc.Privileged != nil && *sc.Privileged
		spec.ReadOnlyRootFS = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		spec.RunAsUser, spec.RunAsGroup = sc.RunAsUser, sc.RunAsGroup
		if caps := sc.Capabilities; caps != nil {
			for _, n := range caps.Drop {
				if strings.EqualFold(n, "ALL") {
					spec.CapDrop = append(spec.CapDrop, "ALL")
				} else {
					spec.CapDrop = append(spec.CapDrop, schema.CapabilityName(n))
				}
			}
			for _, n := range caps.Add {
				spec.CapAdd = append(spec.CapAdd, schema.CapabilityName(n))
			}
		}
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
