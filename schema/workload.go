package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
)

var portRefType = reflect.TypeFor[PortRef]()

// The fields of real edge workloads: hardware access, config and secrets,
// volumes, probes, init containers and ports. Their names are Kubernetes'
// wherever Kubernetes has the concept, so that manifests feel familiar;
// devices and persistent volumes are Fleet's own.

// DeviceMapping makes a device node of the host available in the
// container, as docker run --device does: the node is created in the
// container and the device cgroup allows it.
type DeviceMapping struct {
	// HostPath is the device node on the device, such as /dev/i2c-1,
	// /dev/ttyUSB0 or /dev/gpiochip0: an absolute, clean path under /dev.
	// The agent refuses the pod (with a status message and an event) on a
	// device where it does not exist. Required.
	HostPath string `json:"hostPath"`
	// ContainerPath is where the node appears in the container: absolute
	// and clean. Defaults to hostPath.
	ContainerPath string `json:"containerPath,omitempty"`
	// Permissions are the cgroup permissions: some of r (read), w (write)
	// and m (mknod), in that order. Defaults to rwm.
	Permissions string `json:"permissions,omitempty"`
}

// SecurityContext says with what privileges a container runs.
type SecurityContext struct {
	// Privileged runs the container with every capability and every host
	// device, as docker run --privileged. Defaults to false.
	Privileged *bool `json:"privileged,omitempty"`
	// Capabilities adds Linux capabilities to, or drops them from, the
	// default set.
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// RunAsUser is the user ID the container's process runs as; unset, the
	// image's.
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// RunAsGroup is the group ID the container's process runs as; unset,
	// the image's (or 0).
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`
	// ReadOnlyRootFilesystem mounts the image's file system read-only: the
	// container writes only to its volumes. Defaults to false.
	ReadOnlyRootFilesystem *bool `json:"readOnlyRootFilesystem,omitempty"`
}

// Capabilities lists Linux capabilities, without or with the CAP_
// prefix: SYS_RAWIO, NET_ADMIN, ALL (in drop).
type Capabilities struct {
	// Add lists the capabilities added to the default set.
	Add []string `json:"add,omitempty"`
	// Drop lists the capabilities removed from the default set; ALL drops
	// every one (then add what the process needs).
	Drop []string `json:"drop,omitempty"`
}

// VolumeMount mounts a volume of the pod into the container.
type VolumeMount struct {
	// Name is the name of one of the pod's volumes. Required.
	Name string `json:"name"`
	// MountPath is where the volume appears in the container: absolute
	// and clean, each at most once per container. Required.
	MountPath string `json:"mountPath"`
	// ReadOnly mounts it read-only. Defaults to false.
	ReadOnly bool `json:"readOnly,omitempty"`
	// SubPath mounts one path inside the volume instead of its root: a
	// relative, clean path without "..".
	SubPath string `json:"subPath,omitempty"`
}

// Volume is a directory the pod's containers can mount: exactly one of
// hostPath, emptyDir, persistent, configMap and secret.
type Volume struct {
	// Name identifies the volume in the pod, for volumeMounts: a DNS-1123
	// label, distinct from the pod's other volumes. Required.
	Name string `json:"name"`
	// HostPath is a directory or file of the device.
	HostPath *HostPathVolume `json:"hostPath,omitempty"`
	// EmptyDir is an empty directory created with the pod and removed with
	// it: on the state directory's disk, or in memory.
	EmptyDir *EmptyDirVolume `json:"emptyDir,omitempty"`
	// Persistent is a directory the agent keeps under its state directory
	// for the Deployment: it survives pod updates, agent restarts and
	// rollbacks, and is removed when the Deployment no longer runs on the
	// device (unless reclaimPolicy is Retain).
	Persistent *PersistentVolume `json:"persistent,omitempty"`
	// ConfigMap puts the keys of a ConfigMap as files in the volume,
	// updated in place when the ConfigMap changes.
	ConfigMap *ConfigMapVolume `json:"configMap,omitempty"`
	// Secret puts the keys of a Secret as files in the volume (mode 0400
	// by default, in memory on the device), updated in place when the
	// Secret changes.
	Secret *SecretVolume `json:"secret,omitempty"`
}

// HostPathVolume is a path of the device.
type HostPathVolume struct {
	// Path is the path on the device: absolute and clean. It must exist:
	// the agent creates the container only once it does. Required.
	Path string `json:"path"`
}

// EmptyDirVolume is an empty directory that lives as long as the pod.
type EmptyDirVolume struct {
	// Medium is "" (the state directory's disk) or Memory (a tmpfs, which
	// spares an SD card's writes and is counted in the container's
	// memory).
	Medium string `json:"medium,omitempty"`
	// SizeLimit bounds the directory, in bytes with an optional suffix
	// (16Mi); required for Memory, so a runaway writer cannot fill the
	// device's memory. Defaults to no limit on disk.
	SizeLimit string `json:"sizeLimit,omitempty"`
}

// Persistent volume reclaim policies.
const (
	ReclaimDelete = "Delete"
	ReclaimRetain = "Retain"
)

// PersistentVolume is a directory the agent keeps across pod updates.
type PersistentVolume struct {
	// ReclaimPolicy says what happens to the directory when the Deployment
	// no longer runs on the device: Delete removes it, Retain keeps it
	// (a Deployment of the same name finds it again). Defaults to Delete.
	ReclaimPolicy string `json:"reclaimPolicy,omitempty"`
}

// KeyToPath projects one key of a ConfigMap or Secret to a file.
type KeyToPath struct {
	// Key is the key to project. Required.
	Key string `json:"key"`
	// Path is the file's path in the volume: relative and clean, without
	// "..". Required.
	Path string `json:"path"`
}

// ConfigMapVolume projects a ConfigMap's keys as files.
type ConfigMapVolume struct {
	// Name is the ConfigMap's name. Required.
	Name string `json:"name"`
	// Items, if set, are the keys to project and their file paths; unset,
	// every key is a file of its name.
	Items []KeyToPath `json:"items,omitempty"`
	// DefaultMode is the files' permission bits, 0 to 0777 (in YAML,
	// 0644 is octal). Defaults to 0644.
	DefaultMode *int32 `json:"defaultMode,omitempty"`
	// Optional lets the pod start when the ConfigMap or a key in items
	// does not exist (the volume lacks those files). Defaults to false.
	Optional *bool `json:"optional,omitempty"`
}

// SecretVolume projects a Secret's keys as files.
type SecretVolume struct {
	// SecretName is the Secret's name. Required.
	SecretName string `json:"secretName"`
	// Items, if set, are the keys to project and their file paths; unset,
	// every key is a file of its name.
	Items []KeyToPath `json:"items,omitempty"`
	// DefaultMode is the files' permission bits, 0 to 0777. Defaults to
	// 0400.
	DefaultMode *int32 `json:"defaultMode,omitempty"`
	// Optional lets the pod start when the Secret or a key in items does
	// not exist. Defaults to false.
	Optional *bool `json:"optional,omitempty"`
}

// EnvVarSource takes a variable's value from a ConfigMap or a Secret:
// exactly one of configMapKeyRef and secretKeyRef.
type EnvVarSource struct {
	// ConfigMapKeyRef takes the value of a ConfigMap's key.
	ConfigMapKeyRef *KeySelector `json:"configMapKeyRef,omitempty"`
	// SecretKeyRef takes the value of a Secret's key.
	SecretKeyRef *KeySelector `json:"secretKeyRef,omitempty"`
}

// KeySelector names one key of a ConfigMap or Secret.
type KeySelector struct {
	// Name is the ConfigMap's or Secret's name. Required.
	Name string `json:"name"`
	// Key is the key. Required.
	Key string `json:"key"`
	// Optional lets the pod start without the variable when the object or
	// key does not exist. Defaults to false.
	Optional *bool `json:"optional,omitempty"`
}

// EnvFromSource sets a variable for every key of a ConfigMap or Secret:
// exactly one of configMapRef and secretRef.
type EnvFromSource struct {
	// Prefix is put before every key to make the variable's name.
	Prefix string `json:"prefix,omitempty"`
	// ConfigMapRef names the ConfigMap.
	ConfigMapRef *ObjectRef `json:"configMapRef,omitempty"`
	// SecretRef names the Secret.
	SecretRef *ObjectRef `json:"secretRef,omitempty"`
}

// ObjectRef names a ConfigMap or Secret.
type ObjectRef struct {
	// Name is the object's name. Required.
	Name string `json:"name"`
	// Optional lets the pod start when the object does not exist. Defaults
	// to false.
	Optional *bool `json:"optional,omitempty"`
}

// LocalObjectReference names an object of the same kind a field expects.
type LocalObjectReference struct {
	// Name is the object's name. Required.
	Name string `json:"name"`
}

// Probe checks a container: exactly one of exec, httpGet and tcpSocket,
// with Kubernetes' timing fields.
type Probe struct {
	// Exec runs a command in the container; exit code 0 is success.
	Exec *ExecAction `json:"exec,omitempty"`
	// HTTPGet requests a URL of the container on the device's network; a
	// status from 200 to 399 is success.
	HTTPGet *HTTPGetAction `json:"httpGet,omitempty"`
	// TCPSocket connects to a port; a connection is success.
	TCPSocket *TCPSocketAction `json:"tcpSocket,omitempty"`
	// InitialDelaySeconds is how long after the container starts the
	// first check runs. Defaults to 0.
	InitialDelaySeconds int32 `json:"initialDelaySeconds,omitempty"`
	// TimeoutSeconds bounds one check. Defaults to 1.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// PeriodSeconds is how often the check runs. Defaults to 10.
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// SuccessThreshold is how many successes in a row make a failed probe
	// succeed again; 1 for liveness and startup probes. Defaults to 1.
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// FailureThreshold is how many failures in a row make the probe fail.
	// Defaults to 3.
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// ExecAction is a command to run in the container.
type ExecAction struct {
	// Command is the command and its arguments, run without a shell (use
	// [sh, -c, "..."] for one). Required.
	Command []string `json:"command"`
}

// HTTPGetAction is an HTTP GET request to the container.
type HTTPGetAction struct {
	// Path is the request's path. Defaults to /.
	Path string `json:"path,omitempty"`
	// Port is the port: a number, or the name of one of the container's
	// ports. Required.
	Port PortRef `json:"port"`
	// Host is the host to connect to. Defaults to 127.0.0.1 (the pod uses
	// the device's network).
	Host string `json:"host,omitempty"`
	// Scheme is HTTP or HTTPS (whose certificate is not verified, as
	// Kubernetes does). Defaults to HTTP.
	Scheme string `json:"scheme,omitempty"`
	// HTTPHeaders are headers to send.
	HTTPHeaders []HTTPHeader `json:"httpHeaders,omitempty"`
}

// HTTPHeader is one header of a probe's request.
type HTTPHeader struct {
	// Name is the header's name. Required.
	Name string `json:"name"`
	// Value is the header's value.
	Value string `json:"value"`
}

// TCPSocketAction is a TCP connection to the container.
type TCPSocketAction struct {
	// Port is the port: a number, or the name of one of the container's
	// ports. Required.
	Port PortRef `json:"port"`
	// Host is the host to connect to. Defaults to 127.0.0.1.
	Host string `json:"host,omitempty"`
}

// PortRef is a port number (8080) or the name of a container port
// ("http"), as Kubernetes' IntOrString.
type PortRef string

// UnmarshalJSON accepts a JSON number or string; validation judges it.
func (p *PortRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = PortRef(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: portRefType}
	}
	*p = PortRef(n.String())
	return nil
}

// MarshalJSON writes a number as a JSON number, a name as a string.
func (p PortRef) MarshalJSON() ([]byte, error) {
	if n, err := strconv.Atoi(string(p)); err == nil {
		return []byte(strconv.Itoa(n)), nil
	}
	return json.Marshal(string(p))
}

// Number returns the port's number, resolving a name among ports; ok is
// false when it names no port.
func (p PortRef) Number(ports []ContainerPort) (int32, bool) {
	if n, err := strconv.Atoi(string(p)); err == nil {
		return int32(n), n > 0 && n < 65536
	}
	for _, cp := range ports {
		if cp.Name != "" && cp.Name == string(p) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// ContainerPort declares a port the container listens on. Pods use the
// device's network, so it is a port of the device: the hub reports two
// pods that claim the same port and protocol on one device.
type ContainerPort struct {
	// Name names the port for probes: a DNS-1123 label of at most 15
	// characters, distinct in the container.
	Name string `json:"name,omitempty"`
	// ContainerPort is the port number, 1 to 65535. Required.
	ContainerPort int32 `json:"containerPort"`
	// Protocol is TCP or UDP. Defaults to TCP.
	Protocol string `json:"protocol,omitempty"`
}

// Lifecycle holds actions the agent takes around a container's life.
type Lifecycle struct {
	// PreStop runs in the container before the agent stops it (a pod
	// update, a removal); the stop waits for it, within
	// terminationGracePeriodSeconds.
	PreStop *LifecycleHandler `json:"preStop,omitempty"`
}

// LifecycleHandler is an action of a Lifecycle.
type LifecycleHandler struct {
	// Exec runs a command in the container. Required.
	Exec *ExecAction `json:"exec,omitempty"`
}
