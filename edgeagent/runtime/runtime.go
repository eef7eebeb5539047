// Package runtime is the agent's view of a container runtime: a small
// interface, an in-memory Fake (unit tests, hollow agents) and, in
// runtime/containerd, the real implementation.
//
// Images: EnsureImage marks every image it has to pull (LabelPulled), and
// PulledImages and RemoveImage see only those. An image that was on the
// device before the agent asked for it (imported by hand, pulled by
// another tool) is never listed and never deleted, so the agent's image
// garbage collection cannot touch what it did not bring.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distribution/reference"

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

// LabelPulled is set on an image EnsureImage pulled (not on one that was
// present before it); its value is the time of the pull, RFC 3339.
const LabelPulled = "fleet.pulled"

// ImageName returns the canonical name of an image reference, the name a
// runtime stores it under: "nginx:1.25" is "docker.io/library/nginx:1.25",
// "nginx" is "docker.io/library/nginx:latest". Two references name the
// same image when their ImageNames are equal.
//
// Names are remembered (up to maxImageNames references): a device names a
// handful of images and the agent canonicalizes each several times per
// change (image garbage collection, the runtimes' bookkeeping), where
// parsing a reference runs a regular expression.
func ImageName(ref string) (string, error) {
	if n, ok := imageNames.m.Load(ref); ok {
		return n.(string), nil
	}
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	name := named.String()
	if imageNames.n.Add(1) > maxImageNames {
		// Forget them all: simpler than an LRU, and a device that names
		// this many images pays a parse each for a while, no more.
		imageNames.m.Clear()
		imageNames.n.Store(1)
	}
	imageNames.m.Store(ref, name)
	return name, nil
}

// maxImageNames bounds the references ImageName remembers.
const maxImageNames = 512

// imageNames is ImageName's memory: reference to canonical name, and a
// count of the stores since it was last cleared.
var imageNames struct {
	m sync.Map
	n atomic.Int64
}

// Image is an image EnsureImage pulled.
type Image struct {
	// Name is the image's canonical name (see ImageName).
	Name string
	// PulledAt is when EnsureImage last pulled it.
	PulledAt time.Time
}

// DiskSpace describes the filesystem that holds a runtime's images.
type DiskSpace struct {
	// Path is the directory measured.
	Path string
	// Total is the filesystem's size; Free what unprivileged writers
	// may still use, in bytes.
	Total, Free uint64
}

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
	// LogMaxBytes caps each of the log's files and LogMaxFiles is how
	// many rotated files are kept (schema.LogLimits, from the pod's
	// annotations); 0 takes the runtime's default.
	LogMaxBytes int64
	LogMaxFiles int

	// Devices are device nodes of the host made available in the
	// container, as docker run --device does.
	Devices []Device
	// Privileged gives the process every capability and the container
	// every host device, as docker run --privileged does.
	Privileged bool
	// CapAdd and CapDrop change the default capability set: names with
	// the CAP_ prefix, in upper case; "ALL" in CapDrop drops every one
	// (CapAdd is applied after CapDrop).
	CapAdd, CapDrop []string
	// RunAsUser and RunAsGroup are the process's user and group IDs; nil
	// keeps the image's.
	RunAsUser, RunAsGroup *int64
	// ReadOnlyRootFS mounts the image's file system read-only.
	ReadOnlyRootFS bool
}

// Device is one host device node mapped into a container.
type Device struct {
	// HostPath is the node on the host (a symbolic link to one is
	// followed); ContainerPath where it appears in the container.
	HostPath, ContainerPath string
	// Permissions are the device cgroup's: some of r, w and m.
	Permissions string
}

// Credential is a user name and password (or token) for one registry.
type Credential struct {
	Username, Password string
}

type pullCredentialsKey struct{}

// WithPullCredentials returns a context whose EnsureImage calls use
// creds, by registry host as image references write it ("docker.io",
// "registry.local:5000"), before any the runtime was configured with:
// the credentials of a pod's imagePullSecrets travel with its pulls, not
// with the runtime.
func WithPullCredentials(ctx context.Context, creds map[string]Credential) context.Context {
	if len(creds) == 0 {
		return ctx
	}
	return context.WithValue(ctx, pullCredentialsKey{}, creds)
}

// PullCredentials returns the credentials WithPullCredentials put on ctx
// (nil for none). Callers must not modify the map.
func PullCredentials(ctx context.Context) map[string]Credential {
	c, _ := ctx.Value(pullCredentialsKey{}).(map[string]Credential)
	return c
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

	// PulledImages lists the images EnsureImage pulled, by canonical
	// name. An image that was present before EnsureImage was asked for
	// it is never listed, even after a PullAlways refreshed it.
	PulledImages(ctx context.Context) ([]Image, error)
	// RemoveImage deletes an image EnsureImage pulled (by any reference
	// to it) and reclaims the space nothing else uses. ErrNotFound if
	// there is no such image or EnsureImage did not pull it: an image
	// the agent did not bring is not its to delete. Containers created
	// from the image keep running.
	RemoveImage(ctx context.Context, image string) error
	// DiskSpace measures the filesystem that holds the images.
	DiskSpace(ctx context.Context) (DiskSpace, error)
	// Exec runs cmd in the running container id (see exec.go).
	Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (exitCode int, output []byte, err error)
	// ExecStream runs a command in the running container id with its
	// input and output streamed (see exec_stream.go).
	ExecStream(ctx context.Context, id string, o ExecStreamOptions) (exitCode int, err error)
	// Stats measures the running container id from its cgroup (see
	// stats.go). ErrNotRunning if its task does not run.
	Stats(ctx context.Context, id string) (ContainerStats, error)
}
