package schema

import "fmt"

// SecretEnvWarnings returns a warning for every container of a Deployment
// that takes a Secret into its environment (env[].valueFrom.secretKeyRef,
// envFrom[].secretRef). An environment variable is part of the
// container's spec, which containerd keeps in its metadata database on the
// device's disk, so such a value is on the device's disk in clear; a
// Secret mounted as a volume stays in memory (a tmpfs). Apply accepts the
// Deployment and returns these (ApplyResponse.Warnings); fleet apply prints
// them as kubectl prints its warnings.
func SecretEnvWarnings(obj Object) []string {
	d, ok := obj.(*Deployment)
	if !ok {
		return nil
	}
	spec := d.Spec.Template.Spec
	var out []string
	check := func(field string, cs []Container) {
		for i, c := range cs {
			for j, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					out = append(out, secretEnvWarning(d.Metadata.Name, c.Name, fmt.Sprintf("%s[%d].env[%d].valueFrom.secretKeyRef", field, i, j), e.ValueFrom.SecretKeyRef.Name))
				}
			}
			for j, e := range c.EnvFrom {
				if e.SecretRef != nil {
					out = append(out, secretEnvWarning(d.Metadata.Name, c.Name, fmt.Sprintf("%s[%d].envFrom[%d].secretRef", field, i, j), e.SecretRef.Name))
				}
			}
		}
	}
	check("spec.template.spec.initContainers", spec.InitContainers)
	check("spec.template.spec.containers", spec.Containers)
	return out
}

func secretEnvWarning(dep, container, field, secret string) string {
	return fmt.Sprintf("deployment/%s: container %q takes Secret %q into its environment (%s): "+
		"containerd keeps a container's environment in its database on the device's disk, so the value is stored there in clear; "+
		"mount the Secret as a volume (volumes[].secret) to keep it in memory only", dep, container, secret, field)
}
