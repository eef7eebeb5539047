package api

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// admitAgentRollouts checks the AgentRollouts among objs for what their
// validation alone cannot know: spec.version against this hub's release
// (the version-skew policy, schema.CheckAgentSkew), a selector that
// matches at least one device (of the store, or created by the same
// request), and an artifact for the architecture of every matched device
// that has reported one. A refusal is a 400 naming the field, and
// nothing of the request is stored.
func (s *Server) admitAgentRollouts(ctx context.Context, objs []schema.Object) error {
	var rollouts []*schema.AgentRollout
	for _, o := range objs {
		if a, ok := o.(*schema.AgentRollout); ok {
			rollouts = append(rollouts, a)
		}
	}
	if len(rollouts) == 0 {
		return nil
	}
	devices, err := s.devicesWith(ctx, objs)
	if err != nil {
		return err
	}
	var inv invalidObjects
	for _, a := range rollouts {
		if errs := s.agentRolloutErrors(a, devices); len(errs) > 0 {
			inv = append(inv, &schema.ValidationError{Kind: schema.KindAgentRollout, Name: a.Metadata.Name, Errors: errs})
		}
	}
	if len(inv) > 0 {
		return inv
	}
	return nil
}

// agentRolloutErrors are the field errors of one AgentRollout against the
// hub's release and devices.
func (s *Server) agentRolloutErrors(a *schema.AgentRollout, devices map[string]map[string]string) []schema.FieldError {
	var errs []schema.FieldError
	if err := schema.CheckAgentSkew(s.opts.HubVersion, a.Spec.Version); err != nil {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		errs = append(errs, schema.FieldError{Field: field, Message: msg})
	}
	var matched, missing []string
	for _, name := range slices.Sorted(maps.Keys(devices)) {
		labels := devices[name]
		if !a.Spec.Selector.Matches(labels) {
			continue
		}
		matched = append(matched, name)
		if arch := labels[schema.LabelArch]; arch != "" {
			if _, ok := a.Spec.ArtifactFor(arch); !ok {
				missing = append(missing, name+" ("+arch+")")
			}
		}
	}
	switch {
	case len(matched) == 0:
		errs = append(errs, schema.FieldError{Field: "spec.selector", Message: "matches no device: nothing would be rolled out (fleet get devices -l … shows what a selector matches)"})
	case len(missing) > 0:
		errs = append(errs, schema.FieldError{Field: "spec.artifacts", Message: fmt.Sprintf("no artifact for the architecture of %s: add spec.image (multi-arch) or an artifact of that arch", strings.Join(first(missing, 5), ", "))})
	}
	return errs
}

// devicesWith returns the labels of every stored device, and of the
// devices objs create or change.
func (s *Server) devicesWith(ctx context.Context, objs []schema.Object) (map[string]map[string]string, error) {
	stored, _, err := s.store.List(ctx, schema.KindDevice, nil)
	if err != nil {
		return nil, fmt.Errorf("list devices for an agentrollout: %w", err)
	}
	out := make(map[string]map[string]string, len(stored))
	for _, o := range slices.Concat(stored, objs) {
		if d, ok := o.(*schema.Device); ok {
			labels := map[string]string{schema.LabelDevice: d.Metadata.Name}
			maps.Copy(labels, d.Metadata.Labels)
			out[d.Metadata.Name] = labels
		}
	}
	return out, nil
}

// first returns at most n elements of list, and "… and N more" after them.
func first(list []string, n int) []string {
	if len(list) <= n {
		return list
	}
	return append(slices.Clone(list[:n]), fmt.Sprintf("and %d more", len(list)-n))
}
