package schema

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/distribution/reference"
)

// ErrInvalid is wrapped by every validation and decoding error, so callers
// can map it to a 400 with errors.Is.
var ErrInvalid = errors.New("invalid")

// FieldError is one problem with one field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) String() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// ValidationError lists every problem found in one object.
type ValidationError struct {
	Kind   string       `json:"kind,omitempty"`
	Name   string       `json:"name,omitempty"`
	Errors []FieldError `json:"errors"`
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	switch {
	case e.Kind != "" && e.Name != "":
		fmt.Fprintf(&b, "%s %q is invalid: ", e.Kind, e.Name)
	case e.Kind != "":
		fmt.Fprintf(&b, "%s is invalid: ", e.Kind)
	default:
		b.WriteString("invalid: ")
	}
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.String())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// ValidationErrors returns every ValidationError in err's tree, in order:
// a manifest with several bad documents reports them joined, where
// errors.As finds only the first.
func ValidationErrors(err error) []*ValidationError {
	if ve, ok := err.(*ValidationError); ok {
		return []*ValidationError{ve}
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		var out []*ValidationError
		for _, e := range u.Unwrap() {
			out = append(out, ValidationErrors(e)...)
		}
		return out
	case interface{ Unwrap() error }:
		return ValidationErrors(u.Unwrap())
	}
	return nil
}

// errList accumulates field errors.
type errList []FieldError

func (l *errList) add(field, format string, args ...any) {
	*l = append(*l, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (l errList) err(kind, name string) error {
	if len(l) == 0 {
		return nil
	}
	return &ValidationError{Kind: kind, Name: name, Errors: l}
}

var (
	labelName    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)
)

// isDNS1123Label reports whether s matches ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$
// without a regular expression: the broker checks a device's name on every
// message it publishes, and the ingest on every report.
func isDNS1123Label(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// ValidateName checks a DNS-1123 label: at most 63 lower-case alphanumerics
// or '-', starting and ending with an alphanumeric.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("required")
	case len(name) > 63:
		return fmt.Errorf("%q must be no more than 63 characters", truncate(name))
	case !isDNS1123Label(name):
		return fmt.Errorf("%q must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit", truncate(name))
	}
	return nil
}

// ValidateLabelKey checks a label key: an optional DNS subdomain prefix and
// '/', then a name of at most 63 characters.
func ValidateLabelKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)) {
		return fmt.Errorf("key %q: prefix must be a DNS subdomain", truncate(key))
	}
	if name == "" || len(name) > 63 || !labelName.MatchString(name) {
		return fmt.Errorf("key %q: name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", truncate(key))
	}
	return nil
}

// ValidateLabelValue checks a label value: empty, or at most 63 characters of
// letters, digits, '-', '_' or '.', starting and ending with a letter or digit.
func ValidateLabelValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 63 || !labelName.MatchString(v) {
		return fmt.Errorf("value %q must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", truncate(v))
	}
	return nil
}

func validateLabels(labels map[string]string, field string, errs *errList) {
	for k, v := range labels {
		if err := ValidateLabelKey(k); err != nil {
			errs.add(field, "%v", err)
		}
		if err := ValidateLabelValue(v); err != nil {
			errs.add(field+"["+k+"]", "%v", err)
		}
	}
}

// validateSelector checks a label selector as Kubernetes does: valid keys
// and values, a known operator, values for In and NotIn only.
func validateSelector(s LabelSelector, field string, errs *errList) {
	validateLabels(s.MatchLabels, field+".matchLabels", errs)
	for i, r := range s.MatchExpressions {
		f := fmt.Sprintf("%s.matchExpressions[%d]", field, i)
		if r.Key == "" {
			errs.add(f+".key", "required")
		} else if err := ValidateLabelKey(r.Key); err != nil {
			errs.add(f+".key", "%v", err)
		}
		switch r.Operator {
		case LabelSelectorOpIn, LabelSelectorOpNotIn:
			if len(r.Values) == 0 {
				errs.add(f+".values", "must have at least one value when operator is %s", r.Operator)
			}
		case LabelSelectorOpExists, LabelSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				errs.add(f+".values", "must be empty when operator is %s", r.Operator)
			}
		case "":
			errs.add(f+".operator", "required: want %s, %s, %s or %s",
				LabelSelectorOpIn, LabelSelectorOpNotIn, LabelSelectorOpExists, LabelSelectorOpDoesNotExist)
		default:
			errs.add(f+".operator", "unsupported value %q: want %s, %s, %s or %s", truncate(string(r.Operator)),
				LabelSelectorOpIn, LabelSelectorOpNotIn, LabelSelectorOpExists, LabelSelectorOpDoesNotExist)
		}
		for j, v := range r.Values {
			if err := ValidateLabelValue(v); err != nil {
				errs.add(fmt.Sprintf("%s.values[%d]", f, j), "%v", err)
			}
		}
	}
}

func validateMeta(m *ObjectMeta, errs *errList) {
	if err := ValidateName(m.Name); err != nil {
		errs.add("metadata.name", "%v", err)
	}
	validateLabels(m.Labels, "metadata.labels", errs)
	validateAnnotations(m.Annotations, "metadata.annotations", errs)
	if m.ResourceVersion != "" {
		if _, err := strconv.ParseUint(m.ResourceVersion, 10, 64); err != nil {
			errs.add("metadata.resourceVersion", "must be a decimal number, as returned by the hub")
		}
	}
}

// validateAnnotations checks the total size of annotations.
func validateAnnotations(annotations map[string]string, field string, errs *errList) {
	size := 0
	for k, v := range annotations {
		size += len(k) + len(v)
	}
	if size > 64<<10 {
		errs.add(field, "total size must be at most 64 KiB")
	}
}

func validateTypeMeta(tm TypeMeta, kind string, errs *errList) {
	if tm.APIVersion != APIVersion {
		errs.add("apiVersion", "must be %q, got %q", APIVersion, truncate(tm.APIVersion))
	}
	if tm.Kind != kind {
		errs.add("kind", "must be %q, got %q", kind, truncate(tm.Kind))
	}
}

// ValidateDevice checks a Device as sent by a user.
func ValidateDevice(d *Device) error {
	var errs errList
	validateTypeMeta(d.TypeMeta, KindDevice, &errs)
	validateMeta(&d.Metadata, &errs)
	for k, v := range d.Metadata.Labels {
		switch {
		case k == LabelDevice && v != d.Metadata.Name:
			errs.add("metadata.labels["+k+"]", "must equal metadata.name (%q); the hub sets it", d.Metadata.Name)
		case k == LabelArch || k == LabelDevice:
		case strings.HasPrefix(k, LabelPrefix):
			errs.add("metadata.labels["+k+"]", "the %q prefix is reserved for labels the hub sets", LabelPrefix)
		}
	}
	if len(d.Spec.Description) > 1024 {
		errs.add("spec.description", "must be at most 1024 characters")
	}
	return errs.err(KindDevice, d.Metadata.Name)
}

// ValidateDeployment checks a Deployment as sent by a user (after defaulting).
func ValidateDeployment(d *Deployment) error {
	var errs errList
	validateTypeMeta(d.TypeMeta, KindDeployment, &errs)
	validateMeta(&d.Metadata, &errs)
	validateSelector(d.Spec.Selector, "spec.selector", &errs)
	if t := d.Spec.Template.Metadata; t != nil {
		validateLabels(t.Labels, "spec.template.metadata.labels", &errs)
		validateAnnotations(t.Annotations, "spec.template.metadata.annotations", &errs)
		validateLogLimits(t.Annotations, "spec.template.metadata.annotations", &errs) // logopts.go
	}
	if n := d.Spec.RevisionHistoryLimit; n != nil && (*n < 1 || *n > MaxRevisionHistoryLimit) {
		errs.add("spec.revisionHistoryLimit", "%d: must be from 1 to %d", *n, MaxRevisionHistoryLimit)
	}
	validateStrategy(d.Spec.Strategy, "spec.strategy", &errs)
	validateUpdateWindow(d.Spec.UpdateWindow, "spec.updateWindow", &errs) // window.go
	validateUpdateLock(d.Spec.UpdateLock, "spec.updateLock", &errs)
	validatePodSpec(&d.Spec.Template.Spec, "spec.template.spec", &errs)
	return errs.err(KindDeployment, d.Metadata.Name)
}

func validateStrategy(s Strategy, field string, errs *errList) {
	if s.RollingUpdate != nil && s.Type != StrategyRollingUpdate && validStrategyType(s.Type) {
		errs.add(field+".rollingUpdate", "may only be set when type is %q", StrategyRollingUpdate)
	}
	if s.Staged != nil && s.Type != StrategyStaged && validStrategyType(s.Type) {
		errs.add(field+".staged", "may only be set when type is %q", StrategyStaged)
	}
	switch s.Type {
	case "", StrategyAllAtOnce:
	case StrategyRollingUpdate:
		if s.RollingUpdate != nil && s.RollingUpdate.MaxUnavailable != "" {
			if _, err := parseMaxUnavailable(s.RollingUpdate.MaxUnavailable); err != nil {
				errs.add(field+".rollingUpdate.maxUnavailable", "%v", err)
			}
		}
	case StrategyStaged:
		if s.Staged == nil {
			errs.add(field+".staged", "required when type is %q: at least staged.steps, such as [{devices: 1}, {percent: 10, pause: 10m}, {percent: 100}]", StrategyStaged)
			return
		}
		validateStaged(s.Staged, field+".staged", errs)
	default:
		errs.add(field+".type", "unsupported value %q: want %q, %q or %q", truncate(s.Type), StrategyAllAtOnce, StrategyRollingUpdate, StrategyStaged)
	}
}

func validStrategyType(t string) bool {
	switch t {
	case "", StrategyAllAtOnce, StrategyRollingUpdate, StrategyStaged:
		return true
	}
	return false
}

// validateStaged checks a Staged strategy: well-formed steps whose counts
// never decrease and end at 100%, durations, the failure threshold and
// the selector order.
func validateStaged(s *Staged, field string, errs *errList) {
	switch {
	case len(s.Steps) == 0:
		errs.add(field+".steps", "required: at least one step, the last {percent: 100}, such as [{devices: 1}, {percent: 10, pause: 10m}, {percent: 100}]")
	case len(s.Steps) > maxStagedSteps:
		errs.add(field+".steps", "at most %d steps, got %d", maxStagedSteps, len(s.Steps))
	}
	prevDevices, prevPercent := -1, -1 // index of the last step of each kind
	for i, st := range s.Steps {
		f := fmt.Sprintf("%s.steps[%d]", field, i)
		switch {
		case st.Devices != nil && st.Percent != nil:
			errs.add(f, "set exactly one of devices and percent, not both")
		case st.Devices == nil && st.Percent == nil:
			errs.add(f, "set exactly one of devices (a number of devices) and percent (of the targeted devices)")
		case st.Devices != nil:
			switch n := *st.Devices; {
			case n < 1:
				errs.add(f+".devices", "must be at least 1, got %d", n)
			case prevDevices >= 0 && n < *s.Steps[prevDevices].Devices:
				errs.add(f+".devices", "must not be less than the %d devices of steps[%d]: each step counts the devices of the steps before it", *s.Steps[prevDevices].Devices, prevDevices)
			default:
				prevDevices = i
			}
		default:
			switch n := *st.Percent; {
			case n < 1 || n > 100:
				errs.add(f+".percent", "must be from 1 to 100, got %d", n)
			case prevPercent >= 0 && n < *s.Steps[prevPercent].Percent:
				errs.add(f+".percent", "must not be less than the %d%% of steps[%d]: each step counts the devices of the steps before it", *s.Steps[prevPercent].Percent, prevPercent)
			default:
				prevPercent = i
			}
		}
		if st.Pause != "" {
			if _, err := parsePause(st.Pause); err != nil {
				errs.add(f+".pause", "%v", err)
			}
		}
	}
	if n := len(s.Steps); n > 0 && n <= maxStagedSteps {
		last := s.Steps[n-1]
		switch {
		case last.Percent != nil && last.Devices == nil && *last.Percent >= 1 && *last.Percent < 100:
			errs.add(field+".steps", "never reaches 100%%: the last step, steps[%d], stops at %d%% of the devices; end with {percent: 100}", n-1, *last.Percent)
		case last.Devices != nil && last.Percent == nil:
			errs.add(field+".steps", "never reaches 100%%: the last step, steps[%d], counts %d devices, not every targeted device; end with {percent: 100}", n-1, *last.Devices)
		}
	}
	if s.MinReadySeconds < 0 {
		errs.add(field+".minReadySeconds", "must not be negative, got %d", s.MinReadySeconds)
	}
	if p := s.ProgressDeadlineSeconds; p != nil {
		switch {
		case *p < 1:
			errs.add(field+".progressDeadlineSeconds", "must be at least 1, got %d", *p)
		case *p <= s.MinReadySeconds:
			errs.add(field+".progressDeadlineSeconds", "must be greater than minReadySeconds (%d), got %d", s.MinReadySeconds, *p)
		}
	} else if s.MinReadySeconds >= DefaultProgressDeadlineSeconds {
		errs.add(field+".minReadySeconds", "must be less than progressDeadlineSeconds (default %d), got %d: raise progressDeadlineSeconds too", DefaultProgressDeadlineSeconds, s.MinReadySeconds)
	}
	if s.FailureThreshold != "" {
		if _, _, err := parseIntOrPercent(string(s.FailureThreshold)); err != nil {
			errs.add(field+".failureThreshold", "%v", err)
		}
	}
	for i, e := range s.SelectorOrder {
		f := fmt.Sprintf("%s.selectorOrder[%d]", field, i)
		key, value, hasValue := strings.Cut(e, "=")
		if e == "" {
			errs.add(f, "required: want key=value or key, such as canary=true")
			continue
		}
		if err := ValidateLabelKey(key); err != nil {
			errs.add(f, "%v: want key=value or key, such as canary=true", err)
		}
		if hasValue {
			if err := ValidateLabelValue(value); err != nil {
				errs.add(f, "%v: want key=value or key, such as canary=true", err)
			}
		}
	}
}

// parseMaxUnavailable parses "3" or "25%" into (count, percent) form; it
// returns a negative value for a percentage (-25 for "25%").
func parseMaxUnavailable(s string) (int, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return 0, fmt.Errorf("%q: want a percentage from 1%% to 100%%", truncate(s))
		}
		return -n, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q: want a positive count or a percentage such as 25%%", truncate(s))
	}
	return n, nil
}

// MaxUnavailable returns how many of targeted devices a RollingUpdate may
// move at once (at least 1).
func (s Strategy) MaxUnavailable(targeted int) int {
	v := "25%"
	if s.RollingUpdate != nil && s.RollingUpdate.MaxUnavailable != "" {
		v = s.RollingUpdate.MaxUnavailable
	}
	n, err := parseMaxUnavailable(v)
	if err != nil {
		return 1
	}
	if n < 0 {
		n = targeted * -n / 100
	}
	return max(n, 1)
}

func validatePodSpec(p *PodSpec, field string, errs *errList) {
	if len(p.Containers) == 0 {
		errs.add(field+".containers", "required: at least one container")
	}
	if len(p.Containers) > 32 {
		errs.add(field+".containers", "at most 32 containers")
	}
	if len(p.InitContainers) > 16 {
		errs.add(field+".initContainers", "at most 16 init containers")
	}
	switch p.RestartPolicy {
	case "", RestartAlways, RestartOnFailure, RestartNever:
	default:
		errs.add(field+".restartPolicy", "unsupported value %q: want Always, OnFailure or Never", truncate(string(p.RestartPolicy)))
	}
	if p.HostNetwork != nil && !*p.HostNetwork {
		errs.add(field+".hostNetwork", "must be true: pods use the device's host network")
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && (*g < 0 || *g > MaxTerminationGracePeriodSeconds) {
		errs.add(field+".terminationGracePeriodSeconds", "%d: must be from 0 to %d", *g, MaxTerminationGracePeriodSeconds)
	}
	for i, r := range p.ImagePullSecrets {
		if err := ValidateName(r.Name); err != nil {
			errs.add(fmt.Sprintf("%s.imagePullSecrets[%d].name", field, i), "%v", err)
		}
	}
	volumes := validateVolumes(p.Volumes, field+".volumes", errs)
	seen := map[string]bool{}
	hostPorts := map[string]string{} // "8080/TCP" → the field that declares it
	for i := range p.InitContainers {
		validateContainer(&p.InitContainers[i], fmt.Sprintf("%s.initContainers[%d]", field, i), true, volumes, seen, hostPorts, errs)
	}
	for i := range p.Containers {
		validateContainer(&p.Containers[i], fmt.Sprintf("%s.containers[%d]", field, i), false, volumes, seen, hostPorts, errs)
	}
}

// MaxTerminationGracePeriodSeconds bounds terminationGracePeriodSeconds.
const MaxTerminationGracePeriodSeconds = 3600

// validateContainer checks one container (or init container) of a pod:
// seen holds the pod's container names so far, hostPorts its ports. Each
// step reports its problems in field order, so the list reads like the
// manifest.
func validateContainer(c *Container, cf string, init bool, volumes map[string]*Volume, seen map[string]bool, hostPorts map[string]string, errs *errList) {
	validateContainerName(c, cf, seen, errs)
	validateImage(c, cf, errs)
	if c.WorkingDir != "" && !path.IsAbs(c.WorkingDir) {
		errs.add(cf+".workingDir", "must be an absolute path")
	}
	validateEnv(c, cf, errs)
	validateEnvFrom(c, cf, errs)
	validateMounts(c, cf, volumes, errs)
	validateDevices(c, cf, errs)
	validateSecurityContext(c, cf, errs)
	validatePorts(c, cf, hostPorts, errs)
	validateProbes(c, cf, init, errs)
	validatePreStop(c, cf, init, errs)
	validateLimits(c.Resources.Limits, cf+".resources.limits", errs)
}

// validateContainerName checks the container's name and that it is the
// pod's only container of that name.
func validateContainerName(c *Container, cf string, seen map[string]bool, errs *errList) {
	if err := ValidateName(c.Name); err != nil {
		errs.add(cf+".name", "%v", err)
	} else if seen[c.Name] {
		errs.add(cf+".name", "duplicate container name %q", c.Name)
	}
	seen[c.Name] = true
}

// validateImage checks the image reference and the pull policy.
func validateImage(c *Container, cf string, errs *errList) {
	if c.Image == "" {
		errs.add(cf+".image", "required")
	} else if _, err := reference.ParseNormalizedNamed(c.Image); err != nil {
		errs.add(cf+".image", "%q is not a valid image reference: %v", truncate(c.Image), err)
	}
	switch c.ImagePullPolicy {
	case "", PullIfNotPresent, PullAlways:
	default:
		errs.add(cf+".imagePullPolicy", "unsupported value %q: want IfNotPresent or Always", truncate(string(c.ImagePullPolicy)))
	}
}

// validateEnv checks env: valid, distinct names, and a value or a
// valueFrom, not both.
func validateEnv(c *Container, cf string, errs *errList) {
	envSeen := map[string]bool{}
	for j, e := range c.Env {
		ef := fmt.Sprintf("%s.env[%d]", cf, j)
		switch {
		case e.Name == "":
			errs.add(ef+".name", "required")
		case !envName.MatchString(e.Name):
			errs.add(ef+".name", "%q must start with a letter or '_' and contain only letters, digits, '_', '-' or '.'", truncate(e.Name))
		case envSeen[e.Name]:
			errs.add(ef+".name", "duplicate variable %q", e.Name)
		}
		envSeen[e.Name] = true
		if e.ValueFrom != nil {
			if e.Value != "" {
				errs.add(ef+".value", "must be empty when valueFrom is set")
			}
			validateEnvSource(e.ValueFrom, ef+".valueFrom", errs)
		}
	}
}

// validateEnvFrom checks envFrom: one ConfigMap or Secret each, and a valid
// prefix.
func validateEnvFrom(c *Container, cf string, errs *errList) {
	for j, f := range c.EnvFrom {
		ef := fmt.Sprintf("%s.envFrom[%d]", cf, j)
		switch {
		case (f.ConfigMapRef == nil) == (f.SecretRef == nil):
			errs.add(ef, "exactly one of configMapRef and secretRef")
		case f.ConfigMapRef != nil:
			validateRefName(f.ConfigMapRef.Name, ef+".configMapRef.name", errs)
		default:
			validateRefName(f.SecretRef.Name, ef+".secretRef.name", errs)
		}
		if f.Prefix != "" && !envName.MatchString(f.Prefix) {
			errs.add(ef+".prefix", "%q must start with a letter or '_' and contain only letters, digits, '_', '-' or '.'", truncate(f.Prefix))
		}
	}
}

// validateMounts checks mounts and volumeMounts: clean absolute paths, each
// mountPath once across both, and volumes the pod declares.
func validateMounts(c *Container, cf string, volumes map[string]*Volume, errs *errList) {
	mountSeen := map[string]string{}
	mountAt := func(p, field string) {
		if prev, ok := mountSeen[p]; ok {
			errs.add(field, "duplicate mount path %q (also %s)", p, prev)
			return
		}
		mountSeen[p] = field
	}
	for j, m := range c.Mounts {
		mf := fmt.Sprintf("%s.mounts[%d]", cf, j)
		validateAbsPath(m.HostPath, mf+".hostPath", errs)
		validateAbsPath(m.MountPath, mf+".mountPath", errs)
		mountAt(m.MountPath, mf+".mountPath")
	}
	for j, m := range c.VolumeMounts {
		mf := fmt.Sprintf("%s.volumeMounts[%d]", cf, j)
		switch v, ok := volumes[m.Name]; {
		case m.Name == "":
			errs.add(mf+".name", "required: the name of one of the pod's volumes")
		case !ok:
			errs.add(mf+".name", "no volume %q in spec.volumes", truncate(m.Name))
		case m.SubPath != "" && (v.ConfigMap != nil || v.Secret != nil):
			errs.add(mf+".subPath", "a configMap or secret volume is mounted whole: files under a subPath are not updated; use items")
		}
		validateAbsPath(m.MountPath, mf+".mountPath", errs)
		mountAt(m.MountPath, mf+".mountPath")
		if m.SubPath != "" {
			validateRelPath(m.SubPath, mf+".subPath", errs)
		}
	}
}

// validateDevices checks devices: nodes under /dev/, each container path
// once, and permissions.
func validateDevices(c *Container, cf string, errs *errList) {
	devSeen := map[string]bool{}
	for j, d := range c.Devices {
		df := fmt.Sprintf("%s.devices[%d]", cf, j)
		validateAbsPath(d.HostPath, df+".hostPath", errs)
		if d.HostPath != "" && !strings.HasPrefix(d.HostPath, "/dev/") {
			errs.add(df+".hostPath", "%q must be a device node under /dev/", truncate(d.HostPath))
		}
		target := d.ContainerPath
		if target == "" {
			target = d.HostPath
		} else {
			validateAbsPath(target, df+".containerPath", errs)
		}
		if devSeen[target] {
			errs.add(df+".containerPath", "duplicate device path %q", truncate(target))
		}
		devSeen[target] = true
		if !devicePermissions.MatchString(d.Permissions) {
			errs.add(df+".permissions", "%q: want some of r, w and m, in that order (rw, rwm, r)", truncate(d.Permissions))
		}
	}
}

// validateSecurityContext checks capabilities and user and group IDs.
func validateSecurityContext(c *Container, cf string, errs *errList) {
	if sc := c.SecurityContext; sc != nil {
		sf := cf + ".securityContext"
		if caps := sc.Capabilities; caps != nil {
			for j, name := range caps.Add {
				if !validCapability(name, false) {
					errs.add(fmt.Sprintf("%s.capabilities.add[%d]", sf, j), "%q is not a Linux capability (such as SYS_RAWIO, NET_ADMIN, SYS_TIME)", truncate(name))
				}
			}
			for j, name := range caps.Drop {
				if !validCapability(name, true) {
					errs.add(fmt.Sprintf("%s.capabilities.drop[%d]", sf, j), "%q is not a Linux capability (such as NET_RAW, or ALL)", truncate(name))
				}
			}
		}
		if u := sc.RunAsUser; u != nil && (*u < 0 || *u > maxID) {
			errs.add(sf+".runAsUser", "%d: must be from 0 to %d", *u, maxID)
		}
		if g := sc.RunAsGroup; g != nil && (*g < 0 || *g > maxID) {
			errs.add(sf+".runAsGroup", "%d: must be from 0 to %d", *g, maxID)
		}
	}
}

// validatePorts checks ports: numbers, protocols, distinct names, and that
// no other container of the pod declares the same port: they share the
// device's network.
func validatePorts(c *Container, cf string, hostPorts map[string]string, errs *errList) {
	portNames := map[string]bool{}
	for j, p := range c.Ports {
		pf := fmt.Sprintf("%s.ports[%d]", cf, j)
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			errs.add(pf+".containerPort", "%d: must be from 1 to 65535", p.ContainerPort)
		}
		proto := p.Protocol
		switch proto {
		case "":
			proto = "TCP"
		case "TCP", "UDP":
		default:
			errs.add(pf+".protocol", "unsupported value %q: want TCP or UDP", truncate(proto))
		}
		if p.Name != "" {
			if err := ValidateName(p.Name); err != nil || len(p.Name) > 15 {
				errs.add(pf+".name", "%q must be a DNS-1123 label of at most 15 characters", truncate(p.Name))
			} else if portNames[p.Name] {
				errs.add(pf+".name", "duplicate port name %q", p.Name)
			}
			portNames[p.Name] = true
		}
		key := fmt.Sprintf("%d/%s", p.ContainerPort, proto)
		if prev, ok := hostPorts[key]; ok {
			errs.add(pf+".containerPort", "port %s is also declared by %s: containers share the device's network", key, prev)
		} else {
			hostPorts[key] = pf
		}
	}
}

// validateProbes checks the three probes; init containers have none.
func validateProbes(c *Container, cf string, init bool, errs *errList) {
	for _, pr := range []struct {
		name string
		p    *Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.p == nil {
			continue
		}
		if init {
			errs.add(cf+"."+pr.name, "init containers have no probes: they run to completion")
			continue
		}
		validateProbe(pr.p, cf+"."+pr.name, pr.name != "readinessProbe", c.Ports, errs)
	}
}

// validatePreStop checks the preStop hook; init containers have none.
func validatePreStop(c *Container, cf string, init bool, errs *errList) {
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		lf := cf + ".lifecycle.preStop"
		switch {
		case init:
			errs.add(lf, "init containers have no preStop hook")
		case c.Lifecycle.PreStop.Exec == nil || len(c.Lifecycle.PreStop.Exec.Command) == 0:
			errs.add(lf+".exec.command", "required: the command to run before the container stops")
		}
	}
}

// validateLimits checks the memory and CPU limits: well-formed quantities
// no smaller than a container can run with.
func validateLimits(l ResourceList, field string, errs *errList) {
	for _, r := range []struct {
		name, q  string
		parse    func(string) (int64, error)
		min      int64
		tooSmall string
	}{
		{"memory", l.Memory, ParseMemory, 4 << 20, "%q is below the 4Mi minimum a container needs"},
		{"cpu", l.CPU, ParseCPU, 1, "%q must be at least 1m"},
	} {
		if r.q == "" {
			continue
		}
		if n, err := r.parse(r.q); err != nil {
			errs.add(field+"."+r.name, "%v", err)
		} else if n < r.min {
			errs.add(field+"."+r.name, r.tooSmall, r.q)
		}
	}
}

func validateAbsPath(p, field string, errs *errList) {
	switch {
	case p == "":
		errs.add(field, "required")
	case !path.IsAbs(p):
		errs.add(field, "%q must be an absolute path", truncate(p))
	case path.Clean(p) != p:
		errs.add(field, "%q must be a clean path (no '..', '//' or trailing '/')", truncate(p))
	case strings.ContainsRune(p, 0):
		errs.add(field, "must not contain NUL")
	}
}

// ValidateDesiredState checks a DesiredState payload as an agent receives it.
func ValidateDesiredState(d *DesiredState) error {
	var errs errList
	validateTypeMeta(d.TypeMeta, KindDesiredState, &errs)
	if err := ValidateName(d.Device); err != nil {
		errs.add("device", "%v", err)
	}
	if d.Generation < 1 {
		errs.add("generation", "must be positive")
	}
	seen := map[string]bool{}
	for i := range d.Pods {
		pf := fmt.Sprintf("pods[%d]", i)
		if err := ValidateName(d.Pods[i].Name); err != nil {
			errs.add(pf+".name", "%v", err)
		} else if seen[d.Pods[i].Name] {
			errs.add(pf+".name", "duplicate pod %q", d.Pods[i].Name)
		}
		seen[d.Pods[i].Name] = true
		validatePodSpec(&d.Pods[i].Spec, pf+".spec", &errs)
		validateUpdateWindow(d.Pods[i].UpdateWindow, pf+".updateWindow", &errs)
		validateUpdateLock(d.Pods[i].UpdateLock, pf+".updateLock", &errs)
	}
	return errs.err(KindDesiredState, d.Device)
}

// ValidateDeviceStatus checks a DeviceStatus payload as the hub receives it.
func ValidateDeviceStatus(s *DeviceStatus) error {
	var errs errList
	if s.PublicKey != "" {
		if _, err := ParseDevicePublicKey(s.PublicKey); err != nil {
			errs.add("publicKey", "%v", err)
		}
	}
	if s.APIVersion != "" && s.APIVersion != APIVersion {
		errs.add("apiVersion", "must be %q, got %q", APIVersion, truncate(s.APIVersion))
	}
	if s.Kind != "" && s.Kind != KindDeviceStatus {
		errs.add("kind", "must be %q, got %q", KindDeviceStatus, truncate(s.Kind))
	}
	if err := ValidateName(s.Device); err != nil {
		errs.add("device", "%v", err)
	}
	if s.ObservedGeneration < 0 {
		errs.add("observedGeneration", "must not be negative")
	}
	if len(s.Pods) > 256 {
		errs.add("pods", "at most 256 pods")
	}
	for i, p := range s.Pods {
		pf := fmt.Sprintf("pods[%d]", i)
		if err := ValidateName(p.Name); err != nil {
			errs.add(pf+".name", "%v", err)
		}
		switch p.Phase {
		case PhasePending, PhaseRunning, PhaseSucceeded, PhaseFailed, PhaseUnknown:
		default:
			errs.add(pf+".phase", "unsupported value %q", truncate(string(p.Phase)))
		}
		if p.Restarts < 0 {
			errs.add(pf+".restarts", "must not be negative")
		}
	}
	return errs.err(KindDeviceStatus, s.Device)
}

// ValidateEvent checks an Event payload as the hub receives it.
func ValidateEvent(e *Event) error {
	var errs errList
	if e.Kind != "" && e.Kind != KindEvent {
		errs.add("kind", "must be %q, got %q", KindEvent, truncate(e.Kind))
	}
	if err := ValidateName(e.Device); err != nil {
		errs.add("device", "%v", err)
	}
	switch e.Type {
	case EventNormal, EventWarning:
	default:
		errs.add("type", "unsupported value %q: want Normal or Warning", truncate(e.Type))
	}
	if e.Reason == "" {
		errs.add("reason", "required")
	}
	if len(e.Message) > 4096 {
		errs.add("message", "at most 4096 characters")
	}
	if len(e.LogTail) > MaxCrashLogBytes {
		errs.add("logTail", "at most %d bytes", MaxCrashLogBytes)
	}
	if e.Dropped < 0 {
		errs.add("dropped", "must not be negative")
	}
	if len(e.More) > MaxEventBatch {
		errs.add("more", "at most %d events", MaxEventBatch)
	} else {
		for i := range e.More {
			m := &e.More[i]
			field := fmt.Sprintf("more[%d]", i)
			switch {
			case len(m.More) > 0:
				errs.add(field+".more", "must be empty: a batch does not nest")
			case m.Device != e.Device:
				errs.add(field+".device", "must be %q, the batch's device", truncate(e.Device))
			default:
				if err := ValidateEvent(m); err != nil {
					errs.add(field, "%v", err)
				}
			}
		}
	}
	return errs.err(KindEvent, e.Device)
}
