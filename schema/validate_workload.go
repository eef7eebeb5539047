package schema

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

var (
	// devicePermissions: some of r, w, m in that order, or empty.
	devicePermissions = regexp.MustCompile(`^r?w?m?$`)
	// configKey: the keys of ConfigMaps and Secrets, as Kubernetes'.
	configKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
)

// maxID is the largest user or group ID.
const maxID = 1<<31 - 1

// capabilities are the Linux capabilities, without CAP_.
var capabilities = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID
		SETPCAP LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
		SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE
		SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN
		SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE`) {
		capabilities[c] = true
	}
}

// CapabilityName returns a capability's name with the CAP_ prefix, in
// upper case: "sys_rawio" and "CAP_SYS_RAWIO" are "CAP_SYS_RAWIO".
func CapabilityName(name string) string {
	n := strings.ToUpper(name)
	if !strings.HasPrefix(n, "CAP_") {
		n = "CAP_" + n
	}
	return n
}

func validCapability(name string, allowAll bool) bool {
	n := strings.TrimPrefix(strings.ToUpper(name), "CAP_")
	return capabilities[n] || allowAll && strings.EqualFold(name, "ALL")
}

// validateRefName checks the name of a referenced ConfigMap or Secret.
func validateRefName(name, field string, errs *errList) {
	if err := ValidateName(name); err != nil {
		errs.add(field, "%v", err)
	}
}

func validateConfigKeyRef(key, field string, errs *errList) {
	switch {
	case key == "":
		errs.add(field, "required")
	case len(key) > 253 || !configKey.MatchString(key):
		errs.add(field, "%q must be letters, digits, '-', '_' or '.' (at most 253)", truncate(key))
	}
}

func validateEnvSource(s *EnvVarSource, field string, errs *errList) {
	switch {
	case (s.ConfigMapKeyRef == nil) == (s.SecretKeyRef == nil):
		errs.add(field, "exactly one of configMapKeyRef and secretKeyRef")
	case s.ConfigMapKeyRef != nil:
		validateRefName(s.ConfigMapKeyRef.Name, field+".configMapKeyRef.name", errs)
		validateConfigKeyRef(s.ConfigMapKeyRef.Key, field+".configMapKeyRef.key", errs)
	default:
		validateRefName(s.SecretKeyRef.Name, field+".secretKeyRef.name", errs)
		validateConfigKeyRef(s.SecretKeyRef.Key, field+".secretKeyRef.key", errs)
	}
}

// validateRelPath checks a path inside a volume: relative, clean, no "..".
func validateRelPath(p, field string, errs *errList) {
	switch {
	case p == "":
		errs.add(field, "required")
	case path.IsAbs(p):
		errs.add(field, "%q must be a relative path", truncate(p))
	case path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == "..":
		errs.add(field, "%q must be a clean relative path inside the volume (no '..', '//' or trailing '/')", truncate(p))
	case strings.ContainsRune(p, 0):
		errs.add(field, "must not contain NUL")
	}
}

// validateVolumes checks a pod's volumes and returns them by name.
func validateVolumes(vols []Volume, field string, errs *errList) map[string]*Volume {
	out := make(map[string]*Volume, len(vols))
	for i := range vols {
		v := &vols[i]
		vf := fmt.Sprintf("%s[%d]", field, i)
		if err := ValidateName(v.Name); err != nil {
			errs.add(vf+".name", "%v", err)
		} else if _, dup := out[v.Name]; dup {
			errs.add(vf+".name", "duplicate volume name %q", v.Name)
		} else {
			out[v.Name] = v
		}
		n := 0
		for _, set := range []bool{v.HostPath != nil, v.EmptyDir != nil, v.Persistent != nil, v.ConfigMap != nil, v.Secret != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs.add(vf, "exactly one of hostPath, emptyDir, persistent, configMap and secret (found %d)", n)
		}
		switch {
		case v.HostPath != nil:
			validateAbsPath(v.HostPath.Path, vf+".hostPath.path", errs)
		case v.EmptyDir != nil:
			e := v.EmptyDir
			switch e.Medium {
			case "", "Memory":
			default:
				errs.add(vf+".emptyDir.medium", "unsupported value %q: want \"\" (disk) or Memory", truncate(e.Medium))
			}
			if e.SizeLimit != "" {
				if n, err := ParseMemory(e.SizeLimit); err != nil {
					errs.add(vf+".emptyDir.sizeLimit", "%v", err)
				} else if n < 1<<20 {
					errs.add(vf+".emptyDir.sizeLimit", "%q is below the 1Mi minimum", e.SizeLimit)
				}
			} else if e.Medium == "Memory" {
				errs.add(vf+".emptyDir.sizeLimit", "required with medium Memory, such as 16Mi: a tmpfs without a limit can fill the device's memory")
			}
		case v.Persistent != nil:
			switch v.Persistent.ReclaimPolicy {
			case "", ReclaimDelete, ReclaimRetain:
			default:
				errs.add(vf+".persistent.reclaimPolicy", "unsupported value %q: want Delete or Retain", truncate(v.Persistent.ReclaimPolicy))
			}
		case v.ConfigMap != nil:
			validateRefName(v.ConfigMap.Name, vf+".configMap.name", errs)
			validateItems(v.ConfigMap.Items, v.ConfigMap.DefaultMode, vf+".configMap", errs)
		case v.Secret != nil:
			validateRefName(v.Secret.SecretName, vf+".secret.secretName", errs)
			validateItems(v.Secret.Items, v.Secret.DefaultMode, vf+".secret", errs)
		}
	}
	return out
}

func validateItems(items []KeyToPath, mode *int32, field string, errs *errList) {
	seen := map[string]bool{}
	for j, it := range items {
		f := fmt.Sprintf("%s.items[%d]", field, j)
		validateConfigKeyRef(it.Key, f+".key", errs)
		validateRelPath(it.Path, f+".path", errs)
		if seen[it.Path] {
			errs.add(f+".path", "duplicate path %q", truncate(it.Path))
		}
		seen[it.Path] = true
	}
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		errs.add(field+".defaultMode", "%s: must be from 0 to 0777 (octal)", strconv.FormatInt(int64(*mode), 8))
	}
}

// validateProbe checks a probe; restartProbe is a liveness or startup
// probe, whose successThreshold must be 1.
func validateProbe(p *Probe, field string, restartProbe bool, ports []ContainerPort, errs *errList) {
	n := 0
	for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		errs.add(field, "exactly one of exec, httpGet and tcpSocket (found %d)", n)
	}
	port := func(ref PortRef, f string) {
		switch _, ok := ref.Number(ports); {
		case ref == "":
			errs.add(f, "required: a port number or the name of one of the container's ports")
		case !ok:
			if _, err := strconv.Atoi(string(ref)); err == nil {
				errs.add(f, "%s: must be from 1 to 65535", ref)
			} else {
				errs.add(f, "%q names none of the container's ports", truncate(string(ref)))
			}
		}
	}
	switch {
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			errs.add(field+".exec.command", "required: the command to run in the container")
		}
	case p.HTTPGet != nil:
		h := p.HTTPGet
		port(h.Port, field+".httpGet.port")
		switch h.Scheme {
		case "", "HTTP", "HTTPS":
		default:
			errs.add(field+".httpGet.scheme", "unsupported value %q: want HTTP or HTTPS", truncate(h.Scheme))
		}
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			errs.add(field+".httpGet.path", "%q must start with /", truncate(h.Path))
		}
		for j, hd := range h.HTTPHeaders {
			if hd.Name == "" || strings.ContainsAny(hd.Name, " :\r\n") {
				errs.add(fmt.Sprintf("%s.httpGet.httpHeaders[%d].name", field, j), "%q is not a header name", truncate(hd.Name))
			}
		}
	case p.TCPSocket != nil:
		port(p.TCPSocket.Port, field+".tcpSocket.port")
	}
	for _, t := range []struct {
		name string
		v    int32
		min  int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds, 0}, {"timeoutSeconds", p.TimeoutSeconds, 0}, {"periodSeconds", p.PeriodSeconds, 0},
		{"successThreshold", p.SuccessThreshold, 0}, {"failureThreshold", p.FailureThreshold, 0}} {
		if t.v < t.min || t.v > 86400 {
			errs.add(field+"."+t.name, "%d: must be from %d to 86400", t.v, t.min)
		}
	}
	if restartProbe && p.SuccessThreshold > 1 {
		errs.add(field+".successThreshold", "%d: must be 1 for a liveness or startup probe", p.SuccessThreshold)
	}
}

// ProbeDefaults returns a probe's timing with its defaults filled in:
// timeout 1 s, period 10 s, success threshold 1, failure threshold 3.
func (p *Probe) ProbeDefaults() (initialDelay, timeout, period int32, success, failure int32) {
	timeout, period, success, failure = p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold
	if timeout <= 0 {
		timeout = 1
	}
	if period <= 0 {
		period = 10
	}
	if success <= 0 {
		success = 1
	}
	if failure <= 0 {
		failure = 3
	}
	return max(p.InitialDelaySeconds, 0), timeout, period, success, failure
}

// validateConfigData checks the keys and size of a ConfigMap's or Secret's
// data.
func validateConfigData(keys map[string]int, field string, errs *errList) {
	total := 0
	for k, n := range keys {
		if len(k) > 253 || !configKey.MatchString(k) {
			errs.add(field, "key %q must be letters, digits, '-', '_' or '.' (at most 253)", truncate(k))
		}
		total += len(k) + n
	}
	if total > MaxConfigBytes {
		errs.add(field, "%d bytes in all: at most %d (it travels to every device that uses it)", total, MaxConfigBytes)
	}
}

// ValidateConfigMap validates a decoded ConfigMap.
func ValidateConfigMap(c *ConfigMap) error {
	var errs errList
	validateTypeMeta(c.TypeMeta, KindConfigMap, &errs)
	validateMeta(&c.Metadata, &errs)
	keys := map[string]int{}
	for k, v := range c.Data {
		keys[k] = len(v)
	}
	for k, v := range c.BinaryData {
		if _, dup := c.Data[k]; dup {
			errs.add("binaryData", "key %q is in data too", truncate(k))
		}
		keys[k] = len(v)
	}
	validateConfigData(keys, "data", &errs)
	return errs.err(KindConfigMap, c.Metadata.Name)
}

// ValidateSecret validates a decoded and defaulted Secret.
func ValidateSecret(s *Secret) error {
	var errs errList
	validateTypeMeta(s.TypeMeta, KindSecret, &errs)
	validateMeta(&s.Metadata, &errs)
	keys := map[string]int{}
	for k, v := range s.Data {
		keys[k] = len(v)
	}
	for k, v := range s.StringData {
		keys[k] = len(v)
	}
	validateConfigData(keys, "data", &errs)
	switch s.Type {
	case "", SecretOpaque:
	case SecretDockerConfigJSON:
		_, inData := s.Data[DockerConfigJSONKey]
		_, inString := s.StringData[DockerConfigJSONKey]
		if !inData && !inString {
			errs.add("data", "a %s Secret needs the key %s (docker's config.json)", SecretDockerConfigJSON, DockerConfigJSONKey)
		}
	default:
		errs.add("type", "unsupported value %q: want %s or %s", truncate(s.Type), SecretOpaque, SecretDockerConfigJSON)
	}
	return errs.err(KindSecret, s.Metadata.Name)
}
