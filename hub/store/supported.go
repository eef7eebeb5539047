package store

import (
	"fmt"

	"github.com/fleetmq/fleet/schema"
)

// notYetRun names what the schema accepts but this hub and its agents do
// not run yet, so that nothing is stored that would behave other than it
// says (a pod whose device mapping is silently ignored, say). Each entry
// goes as the feature lands end to end.
var notYetRun = struct {
	kinds     map[string]bool
	pod       []podField
	container []containerField
}{
	kinds: map[string]bool{schema.KindConfigMap: true, schema.KindSecret: true},
	pod: []podField{
		{"initContainers", func(p *schema.PodSpec) bool { return len(p.InitContainers) > 0 }},
		{"volumes", func(p *schema.PodSpec) bool { return len(p.Volumes) > 0 }},
		{"terminationGracePeriodSeconds", func(p *schema.PodSpec) bool { return p.TerminationGracePeriodSeconds != nil }},
		{"imagePullSecrets", func(p *schema.PodSpec) bool { return len(p.ImagePullSecrets) > 0 }},
	},
	container: []containerField{
		{"envFrom", func(c *schema.Container) bool { return len(c.EnvFrom) > 0 }},
		{"env[].valueFrom", func(c *schema.Container) bool {
			for _, e := range c.Env {
				if e.ValueFrom != nil {
					return true
				}
			}
			return false
		}},
		{"volumeMounts", func(c *schema.Container) bool { return len(c.VolumeMounts) > 0 }},
		{"devices", func(c *schema.Container) bool { return len(c.Devices) > 0 }},
		{"securityContext", func(c *schema.Container) bool { return c.SecurityContext != nil }},
		{"ports", func(c *schema.Container) bool { return len(c.Ports) > 0 }},
		{"livenessProbe", func(c *schema.Container) bool { return c.LivenessProbe != nil }},
		{"readinessProbe", func(c *schema.Container) bool { return c.ReadinessProbe != nil }},
		{"startupProbe", func(c *schema.Container) bool { return c.StartupProbe != nil }},
		{"lifecycle", func(c *schema.Container) bool { return c.Lifecycle != nil }},
	},
}

type podField struct {
	name string
	set  func(*schema.PodSpec) bool
}

type containerField struct {
	name string
	set  func(*schema.Container) bool
}

// supported refuses, naming each field, what notYetRun lists.
func supported(obj schema.Object) error {
	kind := obj.GetTypeMeta().Kind
	name := obj.GetMetadata().Name
	if notYetRun.kinds[kind] {
		return &schema.ValidationError{Kind: kind, Name: name, Errors: []schema.FieldError{{
			Field: "kind", Message: fmt.Sprintf("%s is not supported by this hub yet", kind),
		}}}
	}
	d, ok := obj.(*schema.Deployment)
	if !ok {
		return nil
	}
	var errs []schema.FieldError
	const msg = "not supported by this hub yet: its agents would not run it"
	spec := &d.Spec.Template.Spec
	for _, f := range notYetRun.pod {
		if f.set(spec) {
			errs = append(errs, schema.FieldError{Field: "spec.template.spec." + f.name, Message: msg})
		}
	}
	for i := range spec.Containers {
		for _, f := range notYetRun.container {
			if f.set(&spec.Containers[i]) {
				errs = append(errs, schema.FieldError{Field: fmt.Sprintf("spec.template.spec.containers[%d].%s", i, f.name), Message: msg})
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &schema.ValidationError{Kind: schema.KindDeployment, Name: name, Errors: errs}
}
