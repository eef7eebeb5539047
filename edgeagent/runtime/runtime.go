// Package runtime is the agent's view of a container runtime: a small
// interface, an in-memory Fake (unit tests, hollow agents) and, in
// runtime/containerd, the real implementation.
package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Sentinel errors; implementations wrap them so callers use errors.Is.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	// ErrImage is wrapped by image pull/import failures (retryable).
	ErrImage = errors.New("image unavailable")
)

// Labels Fleet puts on every container it manages.
const (
	LabelManaged   = "fleet.managed"   // "true"
	LabelPod       = "fleet.pod"       // pod (deployment) name
	LabelContainer = "fleet.container" // container name within the pod
	LabelPodHash   = "fleet.pod-hash"  // schema.PodSpecHash of the pod spec
)

// ContainerSpec is everything needed to create one container.
type ContainerSpec struct {
	// ID is the runtime's container ID, unique on the device.
	ID         string
	Pod        string
	Name       string
	PodHash    string
	Image      string
	PullPolicy schema.PullPolicy
	Command    []string
	Args       []string
	Env        []string // "KEY=VALUE"
	WorkingDir string
	Mounts     []schema.Mount
	// MemoryLimitBytes and CPUMillis are 0 for no limit.
	MemoryLimitBytes int64
	CPUMillis        int64
	// Labels are extra labels; the Label* keys above are always set from
	// the fields.
	Labels map[string]string
	// LogPath receives the container's stdout and stderr; empty discards.
	LogPath string
}

// State of a container's task.
type State string

const (
	StateCreated State = "created" // container exists, no task ever started
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// Container is the observed state of one managed container.
type Container struct {
	ID         string
	Pod        string
	Name       string
	PodHash    string
	Image      string
	Labels     map[string]string
	State      State
	ExitCode   int32
	StartedAt  time.Time
	FinishedAt time.Time
}

// ExitEvent says a container's task exited.
type ExitEvent struct {
	ID       string
	ExitCode int32
	At       time.Time
}

// Runtime manages containers labelled LabelManaged=true in one namespace.
// Every method is safe for concurrent use.
type Runtime interface {
	// EnsureImage makes the image present locally according to policy:
	// IfNotPresent never contacts a registry when it is present.
	EnsureImage(ctx context.Context, image string, policy schema.PullPolicy) error
	// Create creates a container (no task). ErrAlreadyExists if the ID is taken.
	Create(ctx context.Context, spec ContainerSpec) error
	// Start starts the container's task, first deleting an exited one.
	Start(ctx context.Context, id string) error
	// Stop stops the task (SIGTERM, then SIGKILL after timeout) and deletes
	// it; the container stays. Stopping a stopped container is not an error.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Remove stops the task if any and deletes the container and its
	// snapshot. ErrNotFound if there is no such container.
	Remove(ctx context.Context, id string) error
	// List returns every managed container with its task state.
	List(ctx context.Context) ([]Container, error)
	// Exits streams task-exit events until ctx is done. The channel is
	// closed when the stream ends; callers re-List after a reconnect.
	Exits(ctx context.Context) (<-chan ExitEvent, error)
}
