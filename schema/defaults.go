package schema

// Default fills in the defaults of an object in place. It is idempotent.
func Default(o Object) {
	switch o := o.(type) {
	case *Deployment:
		DefaultPodSpec(&o.Spec.Template.Spec)
		if o.Spec.Strategy.Type == "" {
			o.Spec.Strategy.Type = StrategyAllAtOnce
		}
	case *Device:
		// Devices have nothing to default; the hub adds LabelDevice.
	case *Secret:
		DefaultSecret(o)
	case *AgentRollout:
		if o.Spec.Strategy.Type == "" {
			o.Spec.Strategy.Type = StrategyAllAtOnce
		}
	}
}

// DefaultPodSpec fills in a pod spec's defaults in place.
func DefaultPodSpec(p *PodSpec) {
	if p.RestartPolicy == "" {
		p.RestartPolicy = RestartAlways
	}
	if p.HostNetwork == nil {
		t := true
		p.HostNetwork = &t
	}
	for i := range p.Containers {
		if p.Containers[i].ImagePullPolicy == "" {
			p.Containers[i].ImagePullPolicy = PullIfNotPresent
		}
	}
	for i := range p.InitContainers {
		if p.InitContainers[i].ImagePullPolicy == "" {
			p.InitContainers[i].ImagePullPolicy = PullIfNotPresent
		}
	}
}

// Validate validates a decoded and defaulted object.
func Validate(o Object) error {
	switch o := o.(type) {
	case *Deployment:
		return ValidateDeployment(o)
	case *Device:
		return ValidateDevice(o)
	case *ConfigMap:
		return ValidateConfigMap(o)
	case *Secret:
		return ValidateSecret(o)
	case *AgentRollout:
		return ValidateAgentRollout(o)
	}
	return nil
}
