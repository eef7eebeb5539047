// Package state persists what the edge agent must remember across restarts
// and reboots: the last accepted DesiredState, per container, restart
// counts and backoff, and per pod, its rollout memory (the revision that
// last ran steadily, the one before it, and a revision that failed to
// start). Files are replaced atomically (temporary file, fsync,
// rename, fsync of the directory), so a power cut leaves either the old or
// the new version, never a torn one.
//
// Layout under the state directory:
//
//	v1/desired.json   the last accepted DesiredState, as the hub sent it
//	v1/agent.json     store id, applied generation, per-container records,
//	                  per-pod rollout records
//	logs/{pod}/{container}.log
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// LayoutVersion is the version of the on-disk layout (the v1/ directory).
const LayoutVersion = 1

// ErrCorrupt is wrapped by load errors for a file that exists but cannot
// be used. The file has been moved aside (name + ".corrupt").
var ErrCorrupt = errors.New("corrupt state file")

const (
	desiredFile = "desired.json"
	agentFile   = "agent.json"
)

// Key names one container of one pod spec.
type Key struct {
	Pod       string
	Container string
	Hash      string
}

func (k Key) String() string { return k.Pod + "/" + k.Container + "/" + k.Hash }

// MarshalText makes Key usable as a JSON object key.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses "pod/container/hash".
func (k *Key) UnmarshalText(b []byte) error {
	parts := strings.Split(string(b), "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return fmt.Errorf("container key %q: want pod/container/hash", b)
	}
	*k = Key{Pod: parts[0], Container: parts[1], Hash: parts[2]}
	return nil
}

// Record is what the agent remembers about one container across restarts.
type Record struct {
	// Restarts counts restarts after exits (not the first start).
	Restarts int32 `json:"restarts,omitempty"`
	// LastStart is when the agent last started the task.
	LastStart time.Time `json:"lastStart,omitzero"`
	// ExitSeen: the exit that followed LastStart has been accounted
	// (backoff computed). Cleared by the next start.
	ExitSeen     bool      `json:"exitSeen,omitempty"`
	LastExitCode int32     `json:"lastExitCode,omitempty"`
	LastExitAt   time.Time `json:"lastExitAt,omitzero"`
	// Delay is the current crash-loop delay; NotBefore the earliest restart.
	Delay     time.Duration `json:"delay,omitempty"`
	NotBefore time.Time     `json:"notBefore,omitzero"`
	// Done: the container exited and its restart policy says never again.
	Done bool `json:"done,omitempty"`
	// Failures counts consecutive failures to get the container running
	// (pull, create, start); RetryAt is the earliest next attempt.
	Failures int32     `json:"failures,omitempty"`
	RetryAt  time.Time `json:"retryAt,omitzero"`
	// Reason and Message describe the last failure (ErrImagePull, …).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Prepared: the container's image is present, so it may replace the
	// running older version of its pod (download, then replace).
	Prepared bool `json:"prepared,omitempty"`
	// FailedStarts counts the container's failed starts: failures to
	// create or start it, and exits before it had run steadily (see
	// reconcile.DefaultSteadyAfter), a completion under a policy that
	// does not restart it excepted. It decides whether a new revision of
	// the pod never started (reconcile.FailedStartLimit).
	FailedStarts int32 `json:"failedStarts,omitempty"`
	// Unhealthy: the agent is stopping the running task because its
	// liveness or startup probe failed; its exit is then restarted unless
	// the restart policy is Never, whatever its code. Cleared when that
	// exit is accounted.
	Unhealthy bool `json:"unhealthy,omitempty"`
}

// History maps containers to their records.
type History map[Key]Record

// Clone returns a copy of h.
func (h History) Clone() History {
	out := make(History, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}

// Rollout is what the agent remembers about the revisions of one pod, so
// that a new revision that never starts can be undone on the device:
// Steady is what the agent goes back to, Previous the steady revision
// before it (its images are kept for a fast undo), Failed a desired
// revision that failed to start and is not retried until the desired
// revision changes. Current is the revision the agent last started, while
// it is not steady yet: it becomes steady once it has run long enough,
// whether or not it is still the desired one by then (a newer revision
// whose image cannot be pulled leaves it running). Since of Current is
// when the agent first started it. Revisions and failures are values:
// they are replaced, never modified in place.
type Rollout struct {
	Steady   *Revision `json:"steady,omitempty"`
	Previous *Revision `json:"previous,omitempty"`
	Failed   *Failure  `json:"failed,omitempty"`
	Current  *Revision `json:"current,omitempty"`
}

// IsZero reports whether r remembers nothing.
func (r Rollout) IsZero() bool {
	return r.Steady == nil && r.Previous == nil && r.Failed == nil && r.Current == nil
}

// Revision is one revision of a pod that ran steadily.
type Revision struct {
	// Pod is the pod as it was desired, with Hash set to the agent's
	// hash of it (the hash its containers are labelled with).
	Pod schema.Pod `json:"pod"`
	// Since is when the agent saw it run steadily.
	Since time.Time `json:"since"`
}

// Failure is a desired revision of a pod that failed to start.
type Failure struct {
	// Hash is the revision's pod hash.
	Hash string `json:"hash"`
	// Container is the container that failed; Reason is how
	// (CrashLoopBackOff, Error, CreateContainerError, RunContainerError,
	// CreateContainerConfigError); ExitCode its last exit code, if it
	// exited; Attempts its failed starts.
	Container string `json:"container"`
	Reason    string `json:"reason"`
	ExitCode  int32  `json:"exitCode,omitempty"`
	Attempts  int32  `json:"attempts,omitempty"`
	// Message says what happened, e.g. "container app: exit code 1, 3
	// times".
	Message string `json:"message,omitempty"`
	// At is when the agent gave the revision up.
	At time.Time `json:"at"`
}

// Rollouts maps pod names to their rollout records.
type Rollouts map[string]Rollout

// Clone returns a copy of r (revisions and failures are shared: they are
// never modified in place).
func (r Rollouts) Clone() Rollouts {
	out := make(Rollouts, len(r))
	for k, v := range r {
		out[k] = v
	}
	return out
}

// Agent is the content of agent.json.
type Agent struct {
	Version int `json:"version"`
	// Store and AppliedGeneration identify the desired state last fully
	// applied (the observedGeneration reported in status).
	Store             string  `json:"store,omitempty"`
	AppliedGeneration int64   `json:"appliedGeneration,omitempty"`
	Containers        History `json:"containers,omitempty"`
	// Rollouts are the pods' rollout records (added in the same layout
	// version: an older agent ignores them, a newer one starts without).
	Rollouts Rollouts `json:"rollouts,omitempty"`
}

// Dir is an opened state directory.
type Dir struct {
	root string

	mu sync.Mutex
	// agentJSON and desired are what was last written to agent.json and
	// desired.json: the same bytes again are not written.
	agentJSON []byte
	desired   []byte
}

// Open creates (0700) and opens a state directory.
func Open(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("open state dir: empty path")
	}
	d := &Dir{root: root}
	if err := os.MkdirAll(d.versioned(), 0o700); err != nil {
		return nil, fmt.Errorf("open state dir: %w", err)
	}
	return d, nil
}

// Root returns the state directory.
func (d *Dir) Root() string { return d.root }

func (d *Dir) versioned() string { return filepath.Join(d.root, fmt.Sprintf("v%d", LayoutVersion)) }

// LogPath returns {root}/logs/{pod}/{container}.log. Pod and container
// names are DNS labels (validated), so they are safe path elements.
func (d *Dir) LogPath(pod, container string) string {
	return filepath.Join(d.root, "logs", pod, container+".log")
}

// LoadDesired returns the persisted DesiredState, defaulted, or nil, nil
// when there is none. A file that does not decode or validate is moved
// aside and reported with ErrCorrupt.
func (d *Dir) LoadDesired() (*schema.DesiredState, error) {
	p := filepath.Join(d.versioned(), desiredFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load desired state: %w", err)
	}
	var ds schema.DesiredState
	if err := json.Unmarshal(b, &ds); err != nil {
		return nil, d.corrupt(p, err)
	}
	if err := schema.ValidateDesiredState(&ds); err != nil {
		return nil, d.corrupt(p, err)
	}
	for i := range ds.Pods {
		schema.DefaultPodSpec(&ds.Pods[i].Spec)
	}
	return &ds, nil
}

// Inspect reads the state under root without changing anything (a
// corrupt file stays where it is, unlike LoadDesired and LoadAgent): for
// diagnostics. desired is nil when none is persisted; err reports a file
// that cannot be read or decoded.
func Inspect(root string) (desired *schema.DesiredState, agent Agent, err error) {
	dir := filepath.Join(root, fmt.Sprintf("v%d", LayoutVersion))
	var errs []error
	if b, rerr := os.ReadFile(filepath.Join(dir, desiredFile)); rerr == nil {
		var ds schema.DesiredState
		if derr := json.Unmarshal(b, &ds); derr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desiredFile, derr))
		} else if verr := schema.ValidateDesiredState(&ds); verr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desiredFile, verr))
		} else {
			desired = &ds
		}
	} else if !errors.Is(rerr, fs.ErrNotExist) {
		errs = append(errs, rerr)
	}
	if b, rerr := os.ReadFile(filepath.Join(dir, agentFile)); rerr == nil {
		if derr := json.Unmarshal(b, &agent); derr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", agentFile, derr))
		}
	} else if !errors.Is(rerr, fs.ErrNotExist) {
		errs = append(errs, rerr)
	}
	return desired, agent, errors.Join(errs...)
}

// SaveDesiredPayload persists a desired-state payload, as received,
// atomically. The caller has decoded and validated it; LoadDesired
// decodes, validates and defaults it again. Saving the bytes the agent
// received spares encoding the decoded state again on every change.
func (d *Dir) SaveDesiredPayload(payload []byte) error {
	return d.Save(payload, nil)
}

// LoadAgent returns the persisted agent state; a missing file gives the
// zero Agent and no error.
func (d *Dir) LoadAgent() (Agent, error) {
	p := filepath.Join(d.versioned(), agentFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Agent{Version: LayoutVersion, Containers: History{}}, nil
	}
	if err != nil {
		return Agent{Version: LayoutVersion, Containers: History{}}, fmt.Errorf("load agent state: %w", err)
	}
	var a Agent
	if err := json.Unmarshal(b, &a); err != nil {
		return Agent{Version: LayoutVersion, Containers: History{}}, d.corrupt(p, err)
	}
	if a.Version != LayoutVersion {
		return Agent{Version: LayoutVersion, Containers: History{}}, d.corrupt(p, fmt.Errorf("version %d, want %d", a.Version, LayoutVersion))
	}
	if a.Containers == nil {
		a.Containers = History{}
	}
	return a, nil
}

// SaveAgent persists a atomically. It writes nothing when a encodes to
// what its last successful call wrote: the reconciler saves after every
// pass, and most passes change nothing.
func (d *Dir) SaveAgent(a Agent) error {
	return d.Save(nil, &a)
}

// Save persists what one reconcile pass changed, as SaveDesiredPayload
// and SaveAgent do, with one fsync of the directory for both files:
// desired (nil: none to save) is written unless it is the payload last
// saved, and a (nil: none) unless it encodes to what was last written.
// Each file is replaced atomically (written and fsynced under a
// temporary name, renamed), desired.json first; when Save returns nil,
// both are durable. A crash between the two renames leaves the new
// desired state with the previous agent state, as two separate saves
// would. desired is kept, not copied, to compare the next payload with:
// the caller must not modify it.
func (d *Dir) Save(desired []byte, a *Agent) error {
	var agentJSON []byte
	if a != nil {
		a.Version = LayoutVersion
		b, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("save agent state: %w", err)
		}
		agentJSON = b
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	files := make([]fileWrite, 0, 2)
	if desired != nil && !bytes.Equal(desired, d.desired) {
		files = append(files, fileWrite{name: desiredFile, data: desired, perm: 0o600})
	}
	if agentJSON != nil && !bytes.Equal(agentJSON, d.agentJSON) {
		files = append(files, fileWrite{name: agentFile, data: agentJSON, perm: 0o600})
	}
	if len(files) == 0 {
		return nil
	}
	if err := writeFilesAtomic(d.versioned(), files); err != nil {
		return fmt.Errorf("save state: %w", err) // the error names the file
	}
	if desired != nil {
		d.desired = desired
	}
	if agentJSON != nil {
		d.agentJSON = agentJSON
	}
	return nil
}

// corrupt moves a bad file aside so it is kept for inspection but not
// read again, and returns an ErrCorrupt error.
func (d *Dir) corrupt(p string, cause error) error {
	aside := p + ".corrupt"
	if err := os.Rename(p, aside); err != nil {
		return fmt.Errorf("%w: %s: %w (and moving it aside failed: %w)", ErrCorrupt, p, cause, err)
	}
	return fmt.Errorf("%w: %s (moved to %s): %w", ErrCorrupt, p, filepath.Base(aside), cause)
}

// ClientID returns the agent's MQTT client ID: the device name and a random
// suffix, made once and kept in the state directory. An unguessable client
// ID stops another device that knows this one's name from taking over its
// session on brokers that hand a client ID to whoever presents it
// (Mosquitto), while a stable one keeps the broker's view of the device
// steady across restarts.
func (d *Dir) ClientID(device string) (string, error) {
	p := filepath.Join(d.versioned(), "client-id")
	if b, err := os.ReadFile(p); err == nil {
		id := strings.TrimSpace(string(b))
		if strings.HasPrefix(id, device+"-") && len(id) == len(device)+1+16 {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read client id: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make client id: %w", err)
	}
	id := device + "-" + hex.EncodeToString(b[:])
	if err := WriteFileAtomic(p, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save client id: %w", err)
	}
	return id, nil
}
