package schema

import "time"

// APIVersion is the only API version Fleet speaks today.
const APIVersion = "fleet/v1"

// Kinds of object.
const (
	KindDevice       = "Device"
	KindDeployment   = "Deployment"
	KindDesiredState = "DesiredState"
	KindDeviceStatus = "DeviceStatus"
	KindEvent        = "Event"
)

// Well-known labels. The hub sets LabelDevice on every device; the agent's
// report sets LabelArch.
const (
	LabelDevice = "fleet/device"
	LabelArch   = "fleet/arch"
	// LabelPrefix is reserved: users may not set other labels under it.
	LabelPrefix = "fleet/"
)

// TypeMeta names the schema of a serialised object.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ObjectMeta is carried by every stored object. Name and Labels are the
// user's; the rest is set by the hub.
type ObjectMeta struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`

	// UID is unique for the lifetime of the object; a deleted and
	// re-created object gets a new one.
	UID string `json:"uid,omitempty"`
	// Generation is bumped when the spec changes, and only then.
	Generation int64 `json:"generation,omitempty"`
	// ResourceVersion is the store revision of the object's last write, as
	// a decimal string. A write that carries a stale one is refused.
	ResourceVersion   string     `json:"resourceVersion,omitempty"`
	CreationTimestamp *time.Time `json:"creationTimestamp,omitempty"`
}

// Object is implemented by every stored resource (Device, Deployment).
type Object interface {
	GetTypeMeta() *TypeMeta
	GetMetadata() *ObjectMeta
}

// ---- Device ----------------------------------------------------------------

// Device is a registered edge device.
type Device struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta          `json:"metadata"`
	Spec     DeviceSpec          `json:"spec,omitempty"`
	Status   *DeviceObservedInfo `json:"status,omitempty"`
}

// DeviceSpec is what an operator may say about a device beyond its labels.
type DeviceSpec struct {
	// Description is free text shown by `fleet describe`.
	Description string `json:"description,omitempty"`
}

// DeviceObservedInfo is the hub's view of a device, derived from what the
// agent reports. It is read-only through the API.
type DeviceObservedInfo struct {
	Online             bool       `json:"online"`
	LastSeen           *time.Time `json:"lastSeen,omitempty"`
	DesiredGeneration  int64      `json:"desiredGeneration"`
	ObservedGeneration int64      `json:"observedGeneration"`
	// Converged: the agent reports the latest desired generation and every
	// pod is in its wanted phase.
	Converged bool `json:"converged"`
	// Stale: no status has been heard within the stale threshold.
	Stale bool       `json:"stale,omitempty"`
	Agent *AgentInfo `json:"agent,omitempty"`
	Node  *NodeInfo  `json:"node,omitempty"`
	// Pods as last reported by the agent.
	Pods []PodStatus `json:"pods,omitempty"`
}

func (d *Device) GetTypeMeta() *TypeMeta   { return &d.TypeMeta }
func (d *Device) GetMetadata() *ObjectMeta { return &d.Metadata }

// ---- Deployment ------------------------------------------------------------

// Deployment runs one pod on every device its selector matches, like a
// Kubernetes DaemonSet over devices.
type Deployment struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     DeploymentSpec    `json:"spec"`
	Status   *DeploymentStatus `json:"status,omitempty"`
}

func (d *Deployment) GetTypeMeta() *TypeMeta   { return &d.TypeMeta }
func (d *Deployment) GetMetadata() *ObjectMeta { return &d.Metadata }

// DeploymentSpec says where the pod runs and what it is.
type DeploymentSpec struct {
	Selector LabelSelector `json:"selector"`
	Template PodTemplate   `json:"template"`
	Strategy Strategy      `json:"strategy,omitempty"`
}

// LabelSelector matches devices whose labels contain every MatchLabels pair.
// An empty selector matches every device.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// Matches reports whether labels satisfy the selector.
func (s LabelSelector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// PodTemplate is the pod a Deployment stamps onto each device.
type PodTemplate struct {
	Metadata *TemplateMeta `json:"metadata,omitempty"`
	Spec     PodSpec       `json:"spec"`
}

// TemplateMeta carries labels for the pod's containers.
type TemplateMeta struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// Strategy types.
const (
	// StrategyAllAtOnce publishes the new pod to every targeted device at once.
	StrategyAllAtOnce = "AllAtOnce"
	// StrategyRollingUpdate moves at most MaxUnavailable devices at a time to
	// the new pod, waiting for each batch to converge.
	StrategyRollingUpdate = "RollingUpdate"
)

// Strategy governs how a changed template reaches the devices.
type Strategy struct {
	Type          string         `json:"type,omitempty"`
	RollingUpdate *RollingUpdate `json:"rollingUpdate,omitempty"`
}

// RollingUpdate tunes StrategyRollingUpdate.
type RollingUpdate struct {
	// MaxUnavailable is how many targeted devices may be moving to the new
	// pod at once: a count ("2") or a percentage ("25%"). Default "25%".
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
}

// DeploymentStatus aggregates the state of the deployment's devices.
// An offline device counts as pending, never as failed.
type DeploymentStatus struct {
	ObservedGeneration int64 `json:"observedGeneration"`
	Targeted           int   `json:"targeted"`
	Updated            int   `json:"updated"`
	Ready              int   `json:"ready"`
	Pending            int   `json:"pending"`
	Failed             int   `json:"failed"`
}

// ---- Pods --------------------------------------------------------------------

// RestartPolicy says when a pod's exited containers are restarted.
type RestartPolicy string

const (
	RestartAlways    RestartPolicy = "Always"
	RestartOnFailure RestartPolicy = "OnFailure"
	RestartNever     RestartPolicy = "Never"
)

// PullPolicy says when the agent pulls an image.
type PullPolicy string

const (
	// PullIfNotPresent never contacts a registry when the image is present.
	PullIfNotPresent PullPolicy = "IfNotPresent"
	PullAlways       PullPolicy = "Always"
)

// PodSpec is what runs on a device. Pods use host networking.
type PodSpec struct {
	Containers    []Container   `json:"containers"`
	RestartPolicy RestartPolicy `json:"restartPolicy,omitempty"`
	// HostNetwork must be true (the default): Fleet does not manage
	// container networks on devices.
	HostNetwork *bool `json:"hostNetwork,omitempty"`
}

// Container is one process in a pod.
type Container struct {
	Name            string     `json:"name"`
	Image           string     `json:"image"`
	ImagePullPolicy PullPolicy `json:"imagePullPolicy,omitempty"`
	Command         []string   `json:"command,omitempty"`
	Args            []string   `json:"args,omitempty"`
	WorkingDir      string     `json:"workingDir,omitempty"`
	Env             []EnvVar   `json:"env,omitempty"`
	Mounts          []Mount    `json:"mounts,omitempty"`
	Resources       Resources  `json:"resources,omitempty"`
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Mount binds a host path into the container.
type Mount struct {
	HostPath  string `json:"hostPath"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// Resources holds the container's limits.
type Resources struct {
	Limits ResourceList `json:"limits,omitempty"`
}

// ResourceList uses Kubernetes quantity notation: memory "64Mi", cpu "500m".
type ResourceList struct {
	Memory string `json:"memory,omitempty"`
	CPU    string `json:"cpu,omitempty"`
}

// ---- Wire payloads (MQTT) ---------------------------------------------------

// DesiredState is the FULL desired state of one device, published retained on
// fleet/v1/devices/{device}/desired. Never a delta.
type DesiredState struct {
	TypeMeta `json:",inline"`
	Device   string `json:"device"`
	// Generation grows strictly for a device within one hub store.
	Generation int64 `json:"generation"`
	// Store identifies the hub store that issued Generation; an agent that
	// sees a new Store accepts any generation from it.
	Store string `json:"store,omitempty"`
	Pods  []Pod  `json:"pods"`
}

// Pod is one pod in a DesiredState, named after its Deployment.
type Pod struct {
	Name string  `json:"name"`
	Spec PodSpec `json:"spec"`
	// Hash is PodSpecHash(Spec), set by the hub; agents recompute it.
	Hash string `json:"hash,omitempty"`
}

// Pod phases.
type PodPhase string

const (
	PhasePending   PodPhase = "Pending"
	PhaseRunning   PodPhase = "Running"
	PhaseSucceeded PodPhase = "Succeeded"
	PhaseFailed    PodPhase = "Failed"
	PhaseUnknown   PodPhase = "Unknown"
)

// Container states.
const (
	ContainerWaiting = "waiting"
	ContainerRunning = "running"
	ContainerExited  = "exited"
)

// DeviceStatus is what an agent publishes retained on
// fleet/v1/devices/{device}/status.
type DeviceStatus struct {
	TypeMeta           `json:",inline"`
	Device             string      `json:"device"`
	ObservedGeneration int64       `json:"observedGeneration"`
	Store              string      `json:"store,omitempty"`
	Time               time.Time   `json:"time"`
	Agent              AgentInfo   `json:"agent"`
	Node               *NodeInfo   `json:"node,omitempty"`
	Pods               []PodStatus `json:"pods"`
	// Message explains a state the agent cannot act on (a desired state it
	// refused, for example).
	Message string `json:"message,omitempty"`
}

// AgentInfo describes the agent binary.
type AgentInfo struct {
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

// NodeInfo carries the device's facts.
type NodeInfo struct {
	Hostname         string `json:"hostname,omitempty"`
	MemoryTotalBytes uint64 `json:"memoryTotalBytes,omitempty"`
	MemoryAvailBytes uint64 `json:"memoryAvailableBytes,omitempty"`
	DiskTotalBytes   uint64 `json:"diskTotalBytes,omitempty"`
	DiskFreeBytes    uint64 `json:"diskFreeBytes,omitempty"`
	UptimeSeconds    int64  `json:"uptimeSeconds,omitempty"`
}

// PodStatus is the observed state of one pod.
type PodStatus struct {
	Name       string            `json:"name"`
	Hash       string            `json:"hash,omitempty"`
	Phase      PodPhase          `json:"phase"`
	Ready      bool              `json:"ready"`
	Restarts   int32             `json:"restarts"`
	Message    string            `json:"message,omitempty"`
	Containers []ContainerStatus `json:"containers"`
}

// ContainerStatus is the observed state of one container.
type ContainerStatus struct {
	Name      string     `json:"name"`
	Image     string     `json:"image"`
	State     string     `json:"state"`
	ExitCode  int32      `json:"exitCode"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
	Restarts  int32      `json:"restarts,omitempty"`
	Reason    string     `json:"reason,omitempty"`
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Event is published (not retained) on fleet/v1/devices/{device}/events.
type Event struct {
	TypeMeta  `json:",inline"`
	Device    string    `json:"device"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Pod       string    `json:"pod,omitempty"`
	Container string    `json:"container,omitempty"`
	Message   string    `json:"message,omitempty"`
}
