package controller

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Host ports. Pods use the device's network, so two pods on one device
// that declare the same containerPort and protocol cannot both listen.
// The controller reports it: both deployments get a PortConflict
// condition naming the other and the devices they share. (It does not
// refuse the pods: which one should yield is the operator's call, and a
// device's labels, not an apply, usually create the overlap.)

// ConditionPortConflict is the DeploymentCondition type of a host port
// claimed by two deployments on one device.
const ConditionPortConflict = "PortConflict"

// maxConflictDevices bounds the devices a PortConflict message names.
const maxConflictDevices = 3

// hostPorts returns the "8080/TCP" ports a deployment's containers
// declare, sorted.
func hostPorts(dep *schema.Deployment) []string {
	var out []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = "TCP"
			}
			out = append(out, fmt.Sprintf("%d/%s", p.ContainerPort, proto))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// portConflicts finds, for every deployment, the ports it shares with
// others on some device, as one condition per deployment. selectNames
// returns the devices a selector matches, sorted.
func portConflicts(deps []schema.Deployment, selectNames func(schema.LabelSelector) []string) map[string]schema.DeploymentCondition {
	type claimant struct {
		dep   *schema.Deployment
		ports []string
		names []string
	}
	var cs []claimant
	for i := range deps {
		if ports := hostPorts(&deps[i]); len(ports) > 0 {
			cs = append(cs, claimant{dep: &deps[i], ports: ports})
		}
	}
	msgs := map[string][]string{}
	for i := range cs {
		for j := i + 1; j < len(cs); j++ {
			a, b := &cs[i], &cs[j]
			shared := intersect(a.ports, b.ports)
			if len(shared) == 0 {
				continue
			}
			if a.names == nil {
				a.names = selectNames(a.dep.Spec.Selector)
			}
			if b.names == nil {
				b.names = selectNames(b.dep.Spec.Selector)
			}
			devices := intersect(a.names, b.names)
			if len(devices) == 0 {
				continue
			}
			on := strings.Join(devices[:min(len(devices), maxConflictDevices)], ", ")
			if len(devices) > maxConflictDevices {
				on += fmt.Sprintf(" and %d more", len(devices)-maxConflictDevices)
			}
			what := "port " + strings.Join(shared, ", port ")
			for _, pair := range [][2]*claimant{{a, b}, {b, a}} {
				msgs[pair[0].dep.Metadata.Name] = append(msgs[pair[0].dep.Metadata.Name], fmt.Sprintf(
					"%s also claimed by deployment %q on %d %s (%s)", what, pair[1].dep.Metadata.Name, len(devices), plural(len(devices), "device", "devices"), on))
			}
		}
	}
	out := make(map[string]schema.DeploymentCondition, len(msgs))
	for name, m := range msgs {
		out[name] = schema.DeploymentCondition{
			Type: ConditionPortConflict, Status: "True", Reason: "HostPortInUse",
			Message: strings.Join(m, "; ") + ": pods use the device's network, so only one of them can listen",
		}
	}
	return out
}

// intersect returns the strings in both sorted slices, sorted.
func intersect(a, b []string) []string {
	var out []string
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch strings.Compare(a[i], b[j]) {
		case -1:
			i++
		case 1:
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// updatePortConflicts recomputes the port conflicts and returns the
// deployments whose condition changed (their statuses must be published
// again). It logs each new conflict once.
func (c *Controller) updatePortConflicts(deps []schema.Deployment) []string {
	next := portConflicts(deps, c.selectNames)
	var changed []string
	for name, cond := range next {
		if prev, ok := c.portConds[name]; !ok || prev.Message != cond.Message {
			changed = append(changed, name)
			c.log.Warn("host port conflict", "deployment", name, "msg", cond.Message)
		}
	}
	for name := range c.portConds {
		if _, ok := next[name]; !ok {
			changed = append(changed, name)
		}
	}
	c.portConds = next
	slices.Sort(changed)
	return changed
}

// withPortConflict adds the deployment's PortConflict condition, if any,
// to its status.
func (c *Controller) withPortConflict(name string, s schema.DeploymentStatus) schema.DeploymentStatus {
	cond, ok := c.portConds[name]
	if !ok {
		return s
	}
	s.Conditions = append(slices.Clone(s.Conditions), cond)
	return s
}
