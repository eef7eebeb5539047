package controller

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// Host ports. Pods use the device's network, so two pods on one device
// that declare the same containerPort and protocol cannot both listen.
// The status aggregator reports it (portWatch): both deployments get a PortConflict
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

// portClash is two deployments claiming ports on shared devices.
type portClash struct {
	a, b    string // deployment names, a < b
	ports   []string
	devices []string
}

func (p portClash) key() string { return p.a + "\x00" + p.b + "\x00" + strings.Join(p.ports, ",") }

// portConflicts finds, for every deployment, the ports it shares with
// others on some device, as one condition per deployment, and the clashes
// themselves. selectNames returns the devices a selector matches, sorted.
func portConflicts(deps []schema.Deployment, selectNames func(schema.LabelSelector) []string) (map[string]schema.DeploymentCondition, []portClash) {
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
	var clashes []portClash
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
			pair := portClash{a: a.dep.Metadata.Name, b: b.dep.Metadata.Name, ports: shared, devices: devices}
			if pair.b < pair.a {
				pair.a, pair.b = pair.b, pair.a
			}
			clashes = append(clashes, pair)
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
	return out, clashes
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

// hubEvents records events the hub raises on a device; the fleet model is
// one.
type hubEvents interface {
	AddHubEvent(name, uid string, ev schema.Event)
}

var _ hubEvents = (*fleetmodel.Model)(nil)

// portWatch keeps the deployments' PortConflict conditions, for the status
// aggregator, and raises an event on the devices of each new clash.
type portWatch struct {
	fleet  fleetView
	events hubEvents
	log    *slog.Logger
	now    func() time.Time
	// conds holds each deployment's PortConflict condition.
	conds map[string]schema.DeploymentCondition
	// clashes are the clashes of the last check, by portClash.key.
	clashes map[string]bool
}

// update recomputes the port conflicts and returns the deployments whose
// condition changed (their statuses must be published again). It logs
// each new conflict once.
func (w *portWatch) update(deps []schema.Deployment) []string {
	next, clashes := portConflicts(deps, w.fleet.selectNames)
	seen := make(map[string]bool, len(clashes))
	for _, p := range clashes {
		seen[p.key()] = true
		if !w.clashes[p.key()] {
			w.clashEvents(p)
		}
	}
	w.clashes = seen
	var changed []string
	for name, cond := range next {
		if prev, ok := w.conds[name]; !ok || prev.Message != cond.Message {
			changed = append(changed, name)
			w.log.Warn("host port conflict", "deployment", name, "msg", cond.Message)
		}
	}
	for name := range w.conds {
		if _, ok := next[name]; !ok {
			changed = append(changed, name)
		}
	}
	w.conds = next
	slices.Sort(changed)
	return changed
}

// maxClashEvents bounds the devices one new clash raises an event on.
const maxClashEvents = 100

// clashEvents raises a Warning PortConflict event on the devices of a
// new clash (the first maxClashEvents).
func (w *portWatch) clashEvents(p portClash) {
	msg := fmt.Sprintf("port %s claimed by deployments %q and %q: pods use the device's network, so only one of them can listen",
		strings.Join(p.ports, ", port "), p.a, p.b)
	now := w.now()
	for _, name := range p.devices[:min(len(p.devices), maxClashEvents)] {
		d, ok := w.fleet.device(name)
		if !ok {
			continue
		}
		w.events.AddHubEvent(name, d.UID, schema.Event{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
			Device:   name, Time: now, Type: schema.EventWarning, Reason: ConditionPortConflict, Message: msg,
		})
	}
}

// withConflict adds the deployment's PortConflict condition, if any,
// to its status.
func (w *portWatch) withConflict(name string, s schema.DeploymentStatus) schema.DeploymentStatus {
	cond, ok := w.conds[name]
	if !ok {
		return s
	}
	s.Conditions = append(slices.Clone(s.Conditions), cond)
	return s
}
