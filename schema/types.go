package schema

import (
	"maps"
	"slices"
	"strings"
	"time"
)

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

// TypeMeta names the schema of a serialised object: its apiVersion and
// kind.
type TypeMeta struct {
	// APIVersion is the version of the schema the object follows: always
	// "fleet/v1". Manifests must set it.
	APIVersion string `json:"apiVersion"`
	// Kind is the type of the object, such as Deployment or Device.
	// Manifests must set it.
	Kind string `json:"kind"`
}

// ObjectMeta is carried by every stored object. Its name, labels and
// annotations are the user's; the rest is set by the hub.
type ObjectMeta struct {
	// Name identifies the object among those of its kind: a DNS-1123 label of
	// at most 63 lower-case letters, digits and '-', starting and ending with a
	// letter or digit. A Deployment's pods are named after it; a Device's name
	// is its MQTT username. Required.
	Name string `json:"name"`
	// Labels are key/value pairs that Deployments select devices by
	// (spec.selector). A key is a name of at most 63 letters, digits, '-', '_'
	// or '.', starting and ending with a letter or digit, optionally after a DNS
	// subdomain prefix and '/' (site, example.com/site); a value is empty or a
	// name.
	// The "fleet/" prefix is the hub's on devices: it sets fleet/device=<name>
	// on every device, and fleet/arch=<GOARCH> once the agent reports.
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are free-form key/value notes for people and tools; Fleet
	// does not interpret them. At most 64 KiB in all.
	Annotations map[string]string `json:"annotations,omitempty"`

	// UID is unique for the lifetime of the object; a deleted and
	// re-created object gets a new one. Set by the hub.
	UID string `json:"uid,omitempty"`
	// Generation is bumped when the spec changes, and only then. Set by the
	// hub.
	Generation int64 `json:"generation,omitempty"`
	// ResourceVersion is the store revision of the object's last write, as
	// a decimal string. A write that carries a stale one is refused with 409
	// Conflict; one without it is not checked. Set by the hub.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// CreationTimestamp is when the hub first stored the object, an RFC 3339
	// time. Set by the hub.
	CreationTimestamp *time.Time `json:"creationTimestamp,omitempty"`
}

// Object is implemented by every stored resource (Device, Deployment).
type Object interface {
	GetTypeMeta() *TypeMeta
	GetMetadata() *ObjectMeta
}

// ---- Device ----------------------------------------------------------------

// Device is a registered edge device: the labels Deployments select it by,
// and the status its agent reports. "fleet device add" registers one and
// issues its token.
type Device struct {
	TypeMeta `json:",inline"`
	// Metadata names the device and holds the labels Deployments select it
	// by. Required.
	Metadata ObjectMeta `json:"metadata"`
	// Spec is what an operator says about the device beyond its labels.
	Spec DeviceSpec `json:"spec,omitempty"`
	// Status is the hub's view of the device, from what its agent reports.
	// Read-only: the hub fills it in and ignores it in manifests.
	Status *DeviceObservedInfo `json:"status,omitempty"`
}

// DeviceSpec is what an operator may say about a device beyond its labels.
type DeviceSpec struct {
	// Description is free text shown by `fleet describe`.
	Description string `json:"description,omitempty"`
}

// DeviceObservedInfo is the hub's view of a device, derived from what the
// agent reports. It is read-only through the API.
type DeviceObservedInfo struct {
	// Online is the device's last word on its online topic: true after it
	// connected and said "online", false after it said "offline" or its
	// connection dropped (its last will).
	Online bool `json:"online"`
	// LastSeen is when the hub last heard from the device's agent, an RFC
	// 3339 time. Unset until the agent first reports. An idle agent sends
	// nothing but its MQTT keepalive, which only the broker sees: while
	// online is true the device is connected, however old lastSeen is.
	LastSeen *time.Time `json:"lastSeen,omitempty"`
	// DesiredGeneration is the generation of the latest desired state the hub
	// published for the device.
	DesiredGeneration int64 `json:"desiredGeneration"`
	// ObservedGeneration is the generation of the desired state the agent
	// last reported acting on; the device is up to date when it equals
	// desiredGeneration.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Converged is true when the agent reports the latest desired generation
	// and every pod is in its wanted phase: ready, or finished for a pod that
	// is not restarted.
	Converged bool `json:"converged"`
	// Stale is true when nothing has been heard from the agent for the hub's
	// --stale-after, when that is set (by default it is not: a device is
	// online while its MQTT session is, which the broker's keepalive and
	// the device's last will decide). A stale device counts as offline.
	Stale bool `json:"stale,omitempty"`
	// Agent describes the agent binary, as last reported.
	Agent *AgentInfo `json:"agent,omitempty"`
	// Node holds facts about the device (memory, disk, uptime), as last
	// reported.
	Node *NodeInfo `json:"node,omitempty"`
	// Pods are the device's pods as its agent last reported them; "fleet get
	// pods" lists them.
	Pods []PodStatus `json:"pods,omitempty"`
	// Message is the agent's last word on a state it cannot act on (a
	// desired state it refused, and why), as last reported.
	Message string `json:"message,omitempty"`
}

func (d *Device) GetTypeMeta() *TypeMeta   { return &d.TypeMeta }
func (d *Device) GetMetadata() *ObjectMeta { return &d.Metadata }

// ---- Deployment ------------------------------------------------------------

// Deployment runs one pod on every device its selector matches, like a
// Kubernetes DaemonSet over devices.
type Deployment struct {
	TypeMeta `json:",inline"`
	// Metadata names the deployment; its pod on every device has the same
	// name. Required.
	Metadata ObjectMeta `json:"metadata"`
	// Spec says which devices run the pod, what the pod is and how a changed
	// pod rolls out. Required.
	Spec DeploymentSpec `json:"spec"`
	// Status counts the targeted devices by how far they are. Read-only: the
	// hub fills it in and ignores it in manifests.
	Status *DeploymentStatus `json:"status,omitempty"`
}

func (d *Deployment) GetTypeMeta() *TypeMeta   { return &d.TypeMeta }
func (d *Deployment) GetMetadata() *ObjectMeta { return &d.Metadata }

// DeploymentSpec says where the pod runs and what it is.
type DeploymentSpec struct {
	// Selector picks the devices the pod runs on, by their labels. An empty
	// selector matches every device.
	Selector LabelSelector `json:"selector"`
	// Template is the pod every selected device runs. Required.
	Template PodTemplate `json:"template"`
	// Strategy governs how a changed template reaches the devices: all at
	// once, or a few devices at a time.
	Strategy Strategy `json:"strategy,omitempty"`
	// Paused stops the rollout of template changes: while it is true no
	// device is moved to a new template; each keeps the pod it has. A
	// device that has none gets the current template if a targeted device
	// already has it, else the pod most targeted devices have, else
	// nothing: pausing never publishes a template no device had. "fleet
	// rollout pause" and "fleet rollout resume" set it. Defaults to false.
	Paused bool `json:"paused,omitempty"`
	// RevisionHistoryLimit is how many revisions of the pod template the
	// hub keeps for "fleet rollout history" and "fleet rollout undo", from 1
	// to 100; the oldest beyond it are deleted. Defaults to 10.
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
	// UpdateWindow says when a device may replace the pod, such as
	// {schedule: "0 1 * * *", duration: 4h, timeZone: device}; outside
	// it the device pulls the new images ahead and waits. Absent: any
	// time. A first install is never held back; "fleet rollout restart
	// --now" skips the window for its revision.
	UpdateWindow *UpdateWindow `json:"updateWindow,omitempty"`
	// UpdateLock lets the pod's containers hold off its replacement by
	// holding a flock on a file in the directory the agent mounts at
	// updateLock.path (/run/fleet/lock), up to a deadline, such as
	// {deadline: 10m, onDeadline: force}. Absent: no lock.
	UpdateLock *UpdateLock `json:"updateLock,omitempty"`
}

// LabelSelector selects by labels as a Kubernetes label selector does: a
// set of labels matches when it contains every MatchLabels pair and
// satisfies every MatchExpressions requirement. An empty selector matches
// every set of labels, the empty one included.
type LabelSelector struct {
	// MatchLabels selects the devices that carry every one of these
	// labels with exactly this value: {site: lab, role: kiosk}.
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions are requirements that must all hold as well, such
	// as {key: site, operator: In, values: [north, south]} or {key: gpu,
	// operator: DoesNotExist}.
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one requirement on the value of one label.
type LabelSelectorRequirement struct {
	// Key is the label the requirement is about, such as site or
	// fleet/arch. Required.
	Key string `json:"key"`
	// Operator relates the label to values: In (set to one of them),
	// NotIn (not set, or set to none of them), Exists (set) or
	// DoesNotExist (not set). Required.
	Operator LabelSelectorOperator `json:"operator"`
	// Values are the label values of In and NotIn, at least one; Exists
	// and DoesNotExist take none.
	Values []string `json:"values,omitempty"`
}

// LabelSelectorOperator relates a label to the values of a requirement.
type LabelSelectorOperator string

// The operators of a requirement, as Kubernetes names them.
const (
	// LabelSelectorOpIn: the label is set to one of the values.
	LabelSelectorOpIn LabelSelectorOperator = "In"
	// LabelSelectorOpNotIn: the label is not set, or set to none of the
	// values.
	LabelSelectorOpNotIn LabelSelectorOperator = "NotIn"
	// LabelSelectorOpExists: the label is set, to any value.
	LabelSelectorOpExists LabelSelectorOperator = "Exists"
	// LabelSelectorOpDoesNotExist: the label is not set.
	LabelSelectorOpDoesNotExist LabelSelectorOperator = "DoesNotExist"
)

// Empty reports whether the selector has no requirement: it matches
// everything.
func (s LabelSelector) Empty() bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// Matches reports whether labels satisfy the selector.
func (s LabelSelector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Matches reports whether labels satisfy the requirement. A requirement
// with an unknown operator matches nothing (validation refuses it).
func (r LabelSelectorRequirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case LabelSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case LabelSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case LabelSelectorOpExists:
		return ok
	case LabelSelectorOpDoesNotExist:
		return !ok
	}
	return false
}

// String is the selector in the labelSelector form kubectl's -l takes:
// the MatchLabels pairs by key ("site=lab"), then the expressions in
// order ("tier in (a,b)", "tier notin (c)", "gpu", "!gpu"), joined by
// commas. It is "" for an empty selector.
func (s LabelSelector) String() string {
	parts := make([]string, 0, len(s.MatchLabels)+len(s.MatchExpressions))
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		parts = append(parts, k+"="+s.MatchLabels[k])
	}
	for _, r := range s.MatchExpressions {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ",")
}

// String is the requirement in kubectl's -l form.
func (r LabelSelectorRequirement) String() string {
	switch r.Operator {
	case LabelSelectorOpIn:
		return r.Key + " in (" + strings.Join(r.Values, ",") + ")"
	case LabelSelectorOpNotIn:
		return r.Key + " notin (" + strings.Join(r.Values, ",") + ")"
	case LabelSelectorOpExists:
		return r.Key
	case LabelSelectorOpDoesNotExist:
		return "!" + r.Key
	}
	return r.Key + " " + string(r.Operator) + " (" + strings.Join(r.Values, ",") + ")"
}

// PodTemplate is the pod a Deployment runs on each selected device.
type PodTemplate struct {
	// Metadata holds the template's labels.
	Metadata *TemplateMeta `json:"metadata,omitempty"`
	// Spec is the pod: its containers and restart policy. Required.
	Spec PodSpec `json:"spec"`
}

// TemplateMeta holds the labels and annotations of a Deployment's pod
// template.
type TemplateMeta struct {
	// Labels are key/value pairs that describe the pod, with the syntax of
	// metadata.labels. "fleet describe deployment" shows them.
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are free-form key/value notes on the pod; they are part
	// of the pod's hash, so changing one restarts the pod on every device
	// (per the strategy). "fleet rollout restart" sets fleet/restartedAt.
	// At most 64 KiB in all.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Strategy types.
const (
	// StrategyAllAtOnce publishes the new pod to every targeted device at once.
	StrategyAllAtOnce = "AllAtOnce"
	// StrategyRollingUpdate moves at most MaxUnavailable devices at a time to
	// the new pod, waiting for each batch to converge.
	StrategyRollingUpdate = "RollingUpdate"
	// StrategyStaged moves the new pod to the devices in waves, each gated
	// on the health of the devices before it, and stops (or rolls back) when
	// too many fail.
	StrategyStaged = "Staged"
)

// Strategy governs how a changed template reaches the devices.
type Strategy struct {
	// Type is AllAtOnce, RollingUpdate or Staged. AllAtOnce publishes a
	// changed pod to every targeted device at once; RollingUpdate moves at
	// most rollingUpdate.maxUnavailable devices at a time, waiting for each
	// batch to converge; Staged moves the devices in the waves of
	// staged.steps, each started only when the devices before it are healthy,
	// and stops or rolls back when too many fail (status.rollout follows
	// it). Defaults to AllAtOnce.
	Type string `json:"type,omitempty"`
	// RollingUpdate tunes the RollingUpdate strategy; it may be set only when
	// type is RollingUpdate.
	RollingUpdate *RollingUpdate `json:"rollingUpdate,omitempty"`
	// Staged describes the waves of the Staged strategy; it is required when
	// type is Staged and may be set only then.
	Staged *Staged `json:"staged,omitempty"`
}

// RollingUpdate tunes the RollingUpdate strategy.
type RollingUpdate struct {
	// MaxUnavailable is how many targeted devices may be moving to the new
	// pod at once: a count ("2") or a percentage of the targeted devices
	// ("25%"), rounded down but at least one. Default "25%".
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
}

// Staged describes a staged rollout: the new pod reaches the targeted
// devices in waves, one per step. A step starts when every device of the
// steps before it runs the new pod Ready for minReadySeconds (or has
// failed, within failureThreshold) and the previous step's pause is over.
// A device fails when its pod crash-loops, its image cannot be pulled, or
// it is online but not Ready within progressDeadlineSeconds. An offline
// device is pending, never failed: the rollout waits for it at most
// progressDeadlineSeconds after giving it the new pod, then goes on
// without it. See package hub/rollout for the exact rules.
type Staged struct {
	// Steps are the waves, in order. Each says how many targeted devices run
	// the new pod once it has started, counting those of the steps before:
	// a number of devices ({devices: 1}) or a percentage of the targeted
	// devices, rounded up ({percent: 10}), and optionally how long to wait
	// once its devices are healthy ({percent: 10, pause: 10m}). The counts
	// never decrease and the last step must be {percent: 100}. Required: at
	// least one step, such as [{devices: 1}, {percent: 10, pause: 10m},
	// {percent: 100}].
	Steps []StagedStep `json:"steps"`
	// MinReadySeconds is how long a device must report the new pod Ready
	// before it counts as healthy. Defaults to 0.
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
	// ProgressDeadlineSeconds is how long an online device may take to
	// report the new pod Ready before it counts as failed, and how long the
	// rollout waits for an offline device before it goes on without it.
	// Defaults to 600.
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
	// FailureThreshold is how many failed devices stop the rollout: a count
	// (3: the third failure stops it) or a percentage of the targeted
	// devices, rounded up ("5%"). 0 stops it at the first failure. Defaults
	// to 0.
	FailureThreshold IntOrPercent `json:"failureThreshold,omitempty"`
	// AutoRollback, when true, moves every device back to the last revision
	// that completed its rollout once the rollout stops, and makes that
	// revision's template the current one again, as fleet rollout undo
	// does (the failed revision stays in the history, marked Failed); when
	// false, the rollout stays stopped where it is, for an operator to
	// decide. Defaults to false.
	AutoRollback bool `json:"autoRollback,omitempty"`
	// SelectorOrder puts devices with these labels first: each entry is
	// "key=value" (the label has this value) or "key" (the label is set);
	// devices matching the first entry go first, then those matching the
	// second, and so on, then the rest; within each group online devices
	// go first, then by device name. Example: [canary=true].
	SelectorOrder []string `json:"selectorOrder,omitempty"`
}

// StagedStep is one wave of a staged rollout: exactly one of devices and
// percent.
type StagedStep struct {
	// Devices is how many targeted devices run the new pod once this step
	// has started, counting those of the steps before: at least 1.
	Devices *int32 `json:"devices,omitempty"`
	// Percent is the percentage of the targeted devices, from 1 to 100,
	// rounded up, that run the new pod once this step has started, counting
	// those of the steps before.
	Percent *int32 `json:"percent,omitempty"`
	// Pause is how long to wait, once every device of this step is healthy,
	// before the next step starts: a duration such as 30s, 10m or 1h30m.
	// After the last step it delays the end of the rollout. Defaults to 0.
	Pause string `json:"pause,omitempty"`
}

// IntOrPercent is a count (3) or a percentage ("5%"). A manifest may write
// the count as a number or a string.
type IntOrPercent string

// DeploymentStatus aggregates the state of the deployment's devices.
// An offline device counts as pending, never as failed.
type DeploymentStatus struct {
	// ObservedGeneration is the deployment's generation these counts are
	// for.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Targeted is how many devices the selector matches.
	Targeted int `json:"targeted"`
	// Updated is how many targeted devices report the current template.
	Updated int `json:"updated"`
	// Ready is how many updated devices have the pod ready, or finished
	// successfully.
	Ready int `json:"ready"`
	// Pending is how many targeted devices are neither ready nor failed:
	// not on the current template yet, starting it, or offline.
	Pending int `json:"pending"`
	// Failed is how many online updated devices report the pod failed.
	Failed int `json:"failed"`
	// Revision is the number of the deployment's current revision: that
	// of its pod template in "fleet rollout history". 0 until the hub
	// has recorded one.
	Revision int64 `json:"revision,omitempty"`
	// Rollout is the state of a Staged rollout (absent for the other
	// strategies): its revision, step, counts, what it waits for, and
	// why it stopped or rolled back.
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Conditions say in one line each how the rollout stands (a
	// Progressing condition, for a Staged rollout).
	Conditions []DeploymentCondition `json:"conditions,omitempty"`
	// Updates counts the targeted devices by where the current revision
	// stands on them (pulled ahead, waiting for a window or lock,
	// switched), when any device reports it. Absent otherwise.
	Updates *UpdateCounts `json:"updates,omitempty"`
}

// UpdateCounts count devices by the state of a revision's update on
// them (schema.PodUpdate).
type UpdateCounts struct {
	// Downloading is how many devices pull the revision's images while
	// the previous version runs.
	Downloading int `json:"downloading"`
	// Downloaded is how many have its images and do not run it yet.
	Downloaded int `json:"downloaded"`
	// Waiting is how many hold it back for their update window or lock.
	Waiting int `json:"waiting"`
	// Switched is how many run it.
	Switched int `json:"switched"`
	// WaitingUntil is the earliest time a device waiting for its
	// update window sees it open.
	WaitingUntil *time.Time `json:"waitingUntil,omitempty"`
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
	// Containers are the pod's containers: at least one, at most 32, with
	// distinct names. Required.
	Containers []Container `json:"containers"`
	// RestartPolicy says when the agent restarts an exited container: Always,
	// OnFailure (after a non-zero exit code) or Never, with a growing back-off
	// between restarts. Defaults to Always.
	RestartPolicy RestartPolicy `json:"restartPolicy,omitempty"`
	// HostNetwork must be true: Fleet does not manage container networks on
	// devices, so containers use the device's network. Defaults to true.
	HostNetwork *bool `json:"hostNetwork,omitempty"`
	// InitContainers run one at a time, in order, each to completion,
	// before the containers start; one that fails is retried per
	// restartPolicy (Never: the pod fails) and holds the containers back.
	InitContainers []Container `json:"initContainers,omitempty"`
	// Volumes are the directories the containers can mount (volumeMounts).
	Volumes []Volume `json:"volumes,omitempty"`
	// TerminationGracePeriodSeconds is how long a container has to exit
	// after SIGTERM (and its preStop hook) before it is killed. Defaults
	// to 10.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// ImagePullSecrets name Secrets of type kubernetes.io/dockerconfigjson
	// with the credentials of private registries.
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// Container is one process in a pod.
type Container struct {
	// Name identifies the container in its pod: a DNS-1123 label, distinct
	// from the pod's other containers. Required.
	Name string `json:"name"`
	// Image is the image reference to run, as docker and kubectl take it:
	// nginx:1.25, ghcr.io/acme/sensor:2.1 or one pinned by @sha256 digest.
	// Required.
	Image string `json:"image"`
	// ImagePullPolicy says when the agent pulls the image: IfNotPresent pulls
	// only an image the device does not have, Always pulls on every container
	// start. Defaults to IfNotPresent.
	ImagePullPolicy PullPolicy `json:"imagePullPolicy,omitempty"`
	// Command replaces the image's entrypoint; unset, the image's runs.
	Command []string `json:"command,omitempty"`
	// Args replace the image's default arguments (its CMD); they follow
	// command when command is set.
	Args []string `json:"args,omitempty"`
	// WorkingDir is the absolute path the container's process starts in;
	// unset, the image's.
	WorkingDir string `json:"workingDir,omitempty"`
	// Env sets environment variables in the container, each name once.
	Env []EnvVar `json:"env,omitempty"`
	// EnvFrom sets a variable for every key of ConfigMaps or Secrets;
	// env wins over it.
	EnvFrom []EnvFromSource `json:"envFrom,omitempty"`
	// Mounts bind paths of the device into the container, each mountPath
	// once.
	Mounts []Mount `json:"mounts,omitempty"`
	// VolumeMounts mount the pod's volumes into the container.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// Devices make device nodes of the device (/dev/i2c-1, /dev/ttyUSB0)
	// available in the container.
	Devices []DeviceMapping `json:"devices,omitempty"`
	// SecurityContext says with what privileges the container runs.
	SecurityContext *SecurityContext `json:"securityContext,omitempty"`
	// Ports declare the ports the container listens on, on the device's
	// network.
	Ports []ContainerPort `json:"ports,omitempty"`
	// LivenessProbe restarts the container when it fails.
	LivenessProbe *Probe `json:"livenessProbe,omitempty"`
	// ReadinessProbe decides whether the container is ready: the pod's
	// READY, and what rollouts wait for. Unset, a running container is
	// ready.
	ReadinessProbe *Probe `json:"readinessProbe,omitempty"`
	// StartupProbe holds the other probes back until it succeeds once;
	// the container is restarted when it fails.
	StartupProbe *Probe `json:"startupProbe,omitempty"`
	// Lifecycle holds the preStop hook.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Resources limits the container's memory and CPU.
	Resources Resources `json:"resources,omitempty"`
}

// EnvVar is one environment variable: a value, or a value from a
// ConfigMap or Secret.
type EnvVar struct {
	// Name of the variable: a letter or '_', then letters, digits, '_', '-'
	// or '.'. Required.
	Name string `json:"name"`
	// Value of the variable; may be empty. Must be empty with valueFrom.
	Value string `json:"value"`
	// ValueFrom takes the value from a key of a ConfigMap or Secret.
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// Mount binds a host path into the container.
type Mount struct {
	// HostPath is the path on the device to mount: absolute and clean (no
	// '..', '//' or trailing '/'). It must exist: the agent creates the
	// container only once it does. Required.
	HostPath string `json:"hostPath"`
	// MountPath is where the host path appears in the container: absolute and
	// clean. Required.
	MountPath string `json:"mountPath"`
	// ReadOnly mounts it read-only. Defaults to false.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// Resources holds the container's limits.
type Resources struct {
	// Limits caps the container's memory and CPU; a limit left out is no
	// limit.
	Limits ResourceList `json:"limits,omitempty"`
}

// ResourceList uses Kubernetes quantity notation: memory "64Mi", cpu "500m".
type ResourceList struct {
	// Memory is the most memory the container may use, in bytes with an
	// optional binary (Ki, Mi, Gi) or decimal (k, M, G) suffix: 64Mi, 1G. At least
	// 4Mi.
	Memory string `json:"memory,omitempty"`
	// CPU is the most CPU time the container may use, in cores or
	// millicores: 500m is half a core, 2 is two cores. At least 1m.
	CPU string `json:"cpu,omitempty"`
}

// ---- Wire payloads (MQTT) ---------------------------------------------------

// DesiredState is the FULL desired state of one device, published retained on
// fleet/v1/devices/{device}/desired. Never a delta.
type DesiredState struct {
	TypeMeta `json:",inline"`
	// Device is the name of the device the state is for.
	Device string `json:"device"`
	// Generation grows strictly for a device within one hub store.
	Generation int64 `json:"generation"`
	// Store identifies the hub store that issued Generation; an agent that
	// sees a new Store accepts any generation from it.
	Store string `json:"store,omitempty"`
	// Pods are every pod the device should run; the agent removes the pods
	// it runs that are not listed.
	Pods []Pod `json:"pods"`
	// ConfigMaps are the ConfigMaps the pods use (env valueFrom, envFrom,
	// configMap volumes), each once, sorted by name; absent ones the pods
	// reference are not listed.
	ConfigMaps []ConfigMapData `json:"configMaps,omitempty"`
	// Secrets are the Secrets the pods use (env, volumes,
	// imagePullSecrets), each once, sorted by name, their values sealed to
	// the device's own public key.
	Secrets []SealedSecret `json:"secrets,omitempty"`
	// Agent, when set, is the agent release the device should run, from
	// an AgentRollout (agentrollout.go). Agents that do not know the
	// field ignore it.
	Agent *DesiredAgent `json:"agent,omitempty"`
	// CABundle is the PEM of every CA the device should trust for the
	// hub's TLS listeners: the hub's CA and, during a CA rotation
	// (fleet-hub ca rotate), the new one beside it. An agent replaces the
	// CA trust it started with (--ca-file, --ca-hash, the CA saved at
	// enrollment) by this bundle once the signed state is accepted, and
	// reports the fingerprints it trusts (DeviceStatus.TrustedCAs).
	// Empty: the hub has no CA of its own, or its CA never rotated; the
	// agent keeps its trust.
	CABundle string `json:"caBundle,omitempty"`
	// Signature is the hub's ed25519 signature over the rest of the
	// payload, always its last member (schema/signature.go); absent from
	// the canonical bytes the hub stores and signs.
	Signature *DesiredStateSignature `json:"signature,omitempty"`
}

// ConfigMapData is a ConfigMap as a device receives it.
type ConfigMapData struct {
	// Name is the ConfigMap's name.
	Name string `json:"name"`
	// Version is the ConfigMap's resourceVersion: it changes when the data
	// does.
	Version string `json:"version"`
	// Data are its text keys.
	Data map[string]string `json:"data,omitempty"`
	// BinaryData are its binary keys.
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
}

// SealedSecret is a Secret as a device receives it: every value sealed
// (NaCl box.SealAnonymous, X25519 + XSalsa20-Poly1305) to the device's
// public key, so only that device can read it.
type SealedSecret struct {
	// Name is the Secret's name.
	Name string `json:"name"`
	// Type is the Secret's type.
	Type string `json:"type,omitempty"`
	// Version is the Secret's resourceVersion: it changes when the data
	// does.
	Version string `json:"version"`
	// KeyID identifies the device key the values are sealed to
	// (DeviceKeyID of its public key).
	KeyID string `json:"keyID"`
	// Data are the keys and their sealed values, base64 in JSON.
	Data map[string][]byte `json:"data,omitempty"`
}

// Pod is one pod in a DesiredState, named after its Deployment.
type Pod struct {
	// Name is the pod's name: that of the Deployment it comes from.
	Name string `json:"name"`
	// Spec is the pod, as the Deployment's spec.template.spec with its
	// defaults filled in.
	Spec PodSpec `json:"spec"`
	// Annotations are the template's annotations
	// (spec.template.metadata.annotations), part of the hash.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Hash identifies the pod: the hub sets it (schema.PodHash: its spec
	// and annotations) and the agent recomputes it. When it changes, the
	// agent replaces the pod's containers.
	Hash string `json:"hash,omitempty"`
	// UpdateWindow is the Deployment's: when the agent may replace a
	// running older revision of the pod by this one. Not part of the
	// hash.
	UpdateWindow *UpdateWindow `json:"updateWindow,omitempty"`
	// UpdateLock is the Deployment's: the lock the pod's containers may
	// hold to delay their replacement. Not part of the hash.
	UpdateLock *UpdateLock `json:"updateLock,omitempty"`
	// UpdateNow says an operator asked for this revision at once ("fleet
	// rollout restart --now"): the agent skips the update window.
	UpdateNow bool `json:"updateNow,omitempty"`
}

// PodPhase sums up the state of a pod's containers.
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
	TypeMeta `json:",inline"`
	// Device is the name of the reporting device: that of the topic.
	Device string `json:"device"`
	// ObservedGeneration is the generation of the desired state the agent
	// last acted on.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Store is the hub store that issued that generation (the desired
	// state's store).
	Store string `json:"store,omitempty"`
	// Time is when the agent made the report, an RFC 3339 time.
	Time time.Time `json:"time"`
	// Agent describes the agent binary.
	Agent AgentInfo `json:"agent"`
	// PublicKey is the device's own X25519 public key, base64 (std, 32
	// bytes), created by the agent at its first start: the hub seals the
	// values of Secrets to it.
	PublicKey string `json:"publicKey,omitempty"`
	// Node holds facts about the device.
	Node *NodeInfo `json:"node,omitempty"`
	// Pods are the observed states of the desired pods.
	Pods []PodStatus `json:"pods"`
	// Message explains a state the agent cannot act on (a desired state it
	// refused, for example).
	Message string `json:"message,omitempty"`
	// TrustedCAs are the pins (schema.CAHash, "sha256:…") of the CAs the
	// agent verifies the hub's TLS listeners with, sorted; empty when it
	// knows none (a plain broker, system roots). The hub completes a CA
	// rotation once every device lists the new CA.
	TrustedCAs []string `json:"trustedCAs,omitempty"`
}

// AgentInfo describes the agent binary.
type AgentInfo struct {
	// Version is the agent's release.
	Version string `json:"version"`
	// OS is the device's operating system, as Go names it (GOOS): linux.
	OS string `json:"os"`
	// Arch is the device's architecture, as Go names it (GOARCH): arm64, arm
	// or amd64. The hub copies it into the device's fleet/arch label.
	Arch string `json:"arch"`
	// TimeZone is the device's local time zone, as the agent reads it
	// (the TZ variable, else /etc/localtime): an IANA name such as
	// Europe/Paris, or Local when it has none. Update windows with
	// timeZone device are read in it.
	TimeZone string `json:"timeZone,omitempty"`
	// UTCOffset is the zone's current offset from UTC, such as +01:00.
	UTCOffset string `json:"utcOffset,omitempty"`
	// Upgrade is where the agent stands in replacing itself with the
	// release its desired state names (desiredState.agent); absent when
	// there is nothing to replace.
	Upgrade *AgentUpgradeStatus `json:"upgrade,omitempty"`
}

// NodeInfo carries the device's facts.
type NodeInfo struct {
	// Hostname is the device's host name.
	Hostname string `json:"hostname,omitempty"`
	// MemoryTotalBytes is the device's memory.
	MemoryTotalBytes uint64 `json:"memoryTotalBytes,omitempty"`
	// MemoryAvailBytes is the memory available to new processes.
	MemoryAvailBytes uint64 `json:"memoryAvailableBytes,omitempty"`
	// DiskTotalBytes is the size of the file system that holds the agent's
	// state directory.
	DiskTotalBytes uint64 `json:"diskTotalBytes,omitempty"`
	// DiskFreeBytes is the space left on that file system.
	DiskFreeBytes uint64 `json:"diskFreeBytes,omitempty"`
	// UptimeSeconds is how long the device has been up.
	UptimeSeconds int64 `json:"uptimeSeconds,omitempty"`
	// TemperatureCelsius is the SoC's temperature
	// (/sys/class/thermal/thermal_zone0), nil where there is none. A move
	// of 5 °C or more is worth a status of its own (checked with memory
	// and disk, every 5 minutes).
	TemperatureCelsius *float64 `json:"temperatureCelsius,omitempty"`
}

// PodStatus is the observed state of one pod.
type PodStatus struct {
	// Name is the pod's name: that of its Deployment.
	Name string `json:"name"`
	// Hash is the hash of the spec the pod runs: the desired pod's hash,
	// or, while failedRevision is set, that of the earlier revision the
	// agent went back to.
	Hash string `json:"hash,omitempty"`
	// Phase sums the pod up: Pending while a container is being created or
	// waits to be, Running while one runs, Succeeded when all exited with
	// code 0, Failed when one exited with another code and is not restarted,
	// Unknown when the agent cannot tell.
	Phase PodPhase `json:"phase"`
	// Ready is true when every container is running.
	Ready bool `json:"ready"`
	// Restarts counts the restarts of the pod's containers.
	Restarts int32 `json:"restarts"`
	// Message says what holds the pod up, such as an image that cannot be
	// pulled and when the agent tries again.
	Message string `json:"message,omitempty"`
	// Containers are the states of the pod's containers.
	Containers []ContainerStatus `json:"containers"`
	// FailedRevision is set while the agent runs an earlier revision of
	// the pod because the desired one failed to start, and went back by
	// itself: hash, phase, ready, restarts and containers then describe
	// the revision that runs, and failedRevision the desired one that
	// failed. Absent otherwise. Agents from before it report the failed
	// revision instead: its hash, phase Failed and its containers.
	FailedRevision *FailedRevision `json:"failedRevision,omitempty"`
	// Update is the pod's pending update while the device holds a new
	// revision back (pulled ahead, waiting for its window or a lock),
	// and once it switched. Absent when no update is pending.
	Update *PodUpdate `json:"update,omitempty"`
}

// PodUpdate is a new revision of a pod on its way onto a device.
type PodUpdate struct {
	// Hash is the new revision's pod hash.
	Hash string `json:"hash"`
	// State is Downloading (its images are being pulled), Downloaded (its
	// images are present, it replaces the running version now), Waiting
	// (downloaded, held back by the update window or lock) or Switched
	// (it runs).
	State UpdateState `json:"state"`
	// Reason says what it waits for: UpdateWindow or UpdateLock.
	Reason string `json:"reason,omitempty"`
	// Until is when the window opens (Reason UpdateWindow), or the
	// lock's deadline (UpdateLock).
	Until *time.Time `json:"until,omitempty"`
	// LockHolder is who holds the update lock: the lock file and the
	// holding process, as "updates.lock: pid 1234 (app)".
	LockHolder string `json:"lockHolder,omitempty"`
	// LockSince is since when the agent found the lock held.
	LockSince *time.Time `json:"lockSince,omitempty"`
	// Message says it in one line, such as "waiting for window until
	// 2026-01-02T01:00:00+01:00".
	Message string `json:"message,omitempty"`
}

// UpdateState is PodUpdate.State.
type UpdateState string

const (
	UpdateDownloading UpdateState = "Downloading"
	UpdateDownloaded  UpdateState = "Downloaded"
	UpdateWaiting     UpdateState = "Waiting"
	UpdateSwitched    UpdateState = "Switched"
)

// Reasons of a waiting PodUpdate.
const (
	UpdateReasonWindow = "UpdateWindow"
	UpdateReasonLock   = "UpdateLock"
)

// FailedRevision is a desired revision of a pod that failed to start on
// the device, which runs the previous one again.
type FailedRevision struct {
	// Hash is the failed revision's pod hash: the desired pod's.
	Hash string `json:"hash"`
	// Container is the container of the failed revision that failed.
	Container string `json:"container,omitempty"`
	// Image is that container's image in the failed revision.
	Image string `json:"image,omitempty"`
	// Reason says how it failed, in kubectl's words: CrashLoopBackOff,
	// Error, CreateContainerError, RunContainerError or
	// CreateContainerConfigError.
	Reason string `json:"reason"`
	// ExitCode is the container's last exit code, if it exited.
	ExitCode int32 `json:"exitCode,omitempty"`
	// Attempts counts the container's failed starts.
	Attempts int32 `json:"attempts,omitempty"`
	// Message says what happened, such as "container app: exit code 1, 3
	// times".
	Message string `json:"message,omitempty"`
	// Time is when the agent gave the revision up, an RFC 3339 time.
	Time *time.Time `json:"time,omitempty"`
}

// StatusText sums the pod's report up as kubectl's STATUS column does:
// the reason of the first container that is not running (ErrImagePull,
// CrashLoopBackOff, ContainerCreating, Completed, Error…), else the
// phase; Unknown without one. It is what the device reported: for a
// device that is unreachable, the pod's status is Unknown.
func (p *PodStatus) StatusText() string {
	for _, c := range p.Containers {
		if c.State != ContainerRunning && c.Reason != "" {
			return c.Reason
		}
	}
	if p.Phase == "" {
		return string(PhaseUnknown)
	}
	return string(p.Phase)
}

// RevisionFailed reports whether the device went back from pod revision
// hash because it failed to start (failedRevision names it).
func (p *PodStatus) RevisionFailed(hash string) bool {
	return p.FailedRevision != nil && p.FailedRevision.Hash == hash
}

// ContainerStatus is the observed state of one container.
type ContainerStatus struct {
	// Name is the container's name.
	Name string `json:"name"`
	// Image is the container's image reference.
	Image string `json:"image"`
	// State is waiting, running or exited.
	State string `json:"state"`
	// ExitCode is the code the container's process last exited with.
	ExitCode int32 `json:"exitCode"`
	// StartedAt is when the container's process started, an RFC 3339 time.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	// Restarts counts the container's restarts.
	Restarts int32 `json:"restarts,omitempty"`
	// Ready says whether a running container is ready: it passes its
	// readiness probe (and has passed its startup probe); one without
	// probes is ready while it runs. Absent when not running, and from
	// agents older than probes.
	Ready *bool `json:"ready,omitempty"`
	// Reason says why the container waits or exited, in kubectl's words,
	// such as ContainerCreating, ErrImagePull, ImagePullBackOff,
	// CrashLoopBackOff, Completed or Error.
	Reason string `json:"reason,omitempty"`
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Event is published (not retained) on fleet/v1/devices/{device}/events.
type Event struct {
	TypeMeta `json:",inline"`
	// ID is unique per event (random, from the device): an event
	// delivered twice (a QoS 1 publish repeated after a reconnect) is
	// kept once. Empty on events from agents before it was added.
	ID string `json:"id,omitempty"`
	// Device is the name of the device the event happened on.
	Device string `json:"device"`
	// Time is when the agent recorded the event, an RFC 3339 time.
	Time time.Time `json:"time"`
	// Type is Normal or Warning.
	Type string `json:"type"`
	// Reason is one word for programs, such as Pulled, Started, BackOff,
	// ErrImagePull or RuntimeUnavailable.
	Reason string `json:"reason"`
	// Pod is the pod the event is about, if any.
	Pod string `json:"pod,omitempty"`
	// Container is the container the event is about, if any.
	Container string `json:"container,omitempty"`
	// Message says what happened, for people; at most 4096 characters.
	Message string `json:"message,omitempty"`
	// ExitCode is the exit code of the container an event is about, when
	// it exited (reasons Exited, BackOff).
	ExitCode *int32 `json:"exitCode,omitempty"`
	// CrashReport is true on an event about a container that exited with
	// a code other than 0 or entered backoff when the device sent the
	// last lines of its log as a crash report: on the device's
	// crashreports topic, which only the hub reads, and from the hub to
	// admins (GET /v1/devices/{device}/crashreports, fleet logs
	// --previous). The log itself is never on an event.
	CrashReport bool `json:"crashReport,omitempty"`
	// LogTail is obsolete: agents before the crashreports topic put the
	// crash report's log here. The hub makes it the container's crash
	// report and removes it from the event before keeping or serving it
	// (setting CrashReport instead); no event the hub serves has one.
	LogTail string `json:"logTail,omitempty"`
	// Dropped counts the events the device dropped before this one
	// because its queue was full while it was offline.
	Dropped int `json:"dropped,omitempty"`
	// More are the events the device recorded right after this one, sent
	// in the same message to save messages (at most MaxEventBatch, in
	// order, each a whole Event of the same device without more of its
	// own). Only on the MQTT events topic: a consumer there that reads
	// only the top-level event misses them; the hub's API lists every
	// event on its own.
	More []Event `json:"more,omitempty"`
}

// MaxEventBatch bounds Event.More.
const MaxEventBatch = 32
