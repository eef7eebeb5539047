// Package containerd implements runtime.Runtime on a containerd daemon
// (client v1.7, daemon 1.6 or later) through its Go client.
//
// Every container Fleet creates lives in one containerd namespace (default
// "fleet") and carries the runtime.Label* labels; List and Exits ignore
// everything else in the namespace. Containers run in the host's network
// namespace with the host's hostname, /etc/hosts and /etc/resolv.conf.
// Devices, privileged mode, capabilities, user and group and a read-only
// root map onto the OCI spec as docker run's flags do (security.go); the
// credentials of runtime.WithPullCredentials go before Options.Registry's
// for that pull only.
//
// Workloads outlive the agent: the shim, not this process, is the parent
// of a task and of what writes its log, so nothing in the task depends on
// this process, and a new Runtime re-attaches to whatever is running.
// State that containerd forgets once a task is deleted (start time, exit
// code, finish time) is kept in labels under "fleet.runtime/", which List
// does not return.
//
// Logs (logs.go): with Options.LogWriter set (fleet-agent sets it to
// itself), the shim starts "fleet-agent log-writer" for each task as a
// binary:// logging program (package logwriter), which rotates the file
// by size as it writes: a container's log files never hold more than
// LogMaxBytes × (LogMaxFiles + 1), at any moment, agent up or down.
// Without it the shim writes the file itself (cio.LogFile) and the runtime
// copy-truncates it every LogCheckInterval, which bounds nothing during a
// burst; and stderr written in the instant before the process exits can
// be lost, as the shim (1.6, 1.7) closes the file once its stdout copy
// ends. The log writer reads both pipes to their end.
package containerd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/remotes/docker"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

var _ runtime.Runtime = (*Runtime)(nil)

// Defaults for Options.
const (
	DefaultSocket           = "/run/containerd/containerd.sock"
	DefaultNamespace        = "fleet"
	DefaultSnapshotter      = "overlayfs"
	DefaultRemoveTimeout    = 10 * time.Second
	DefaultLogMaxBytes      = 10 << 20
	DefaultLogMaxFiles      = 1
	DefaultLogCheckInterval = 30 * time.Second
	DefaultDialTimeout      = 10 * time.Second
)

// Options configure a Runtime. The zero value works.
type Options struct {
	// Socket is containerd's gRPC socket.
	Socket string
	// Namespace is the containerd namespace Fleet's containers live in.
	Namespace string
	// Snapshotter unpacks images and holds container root filesystems.
	Snapshotter string
	// Registry configures mirrors, plain-HTTP hosts and credentials for
	// pulls.
	Registry RegistryConfig
	// Logger receives the runtime's logs; nil discards them.
	Logger *slog.Logger
	// RemoveTimeout is how long Remove waits after SIGTERM before SIGKILL
	// when the container is still running.
	RemoveTimeout time.Duration
	// LogWriter is the absolute path of the program the shim runs to
	// write each task's log, as "LogWriter log-writer OPTIONS" (fleet-agent's
	// hidden subcommand, package logwriter). Empty: the shim writes the
	// file itself and the runtime copy-truncates it (see the package doc).
	LogWriter string
	// LogMaxBytes caps each file of a container's log (default
	// DefaultLogMaxBytes) and LogMaxFiles is how many rotated files are
	// kept, LOGPATH.1 to LOGPATH.N (default DefaultLogMaxFiles); a
	// container's ContainerSpec.LogMaxBytes/LogMaxFiles override them.
	// With LogWriter the current run's files hold at most
	// LogMaxBytes × (LogMaxFiles + 1) at any moment, and the previous
	// run's (kept for logs --previous) as much again. Without it, the
	// live file is copied to LOGPATH.1 and truncated once over the cap,
	// checked every LogCheckInterval, and LogMaxFiles is 1. Negative
	// LogMaxBytes disables the cap.
	LogMaxBytes      int64
	LogMaxFiles      int
	LogCheckInterval time.Duration
	// DialTimeout bounds connecting to containerd in New.
	DialTimeout time.Duration
	// DiskPath is the directory DiskSpace measures (default: the
	// snapshotter's root, as containerd reports it).
	DiskPath string
}

func (o *Options) ensureDefaults() {
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Snapshotter == "" {
		o.Snapshotter = DefaultSnapshotter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RemoveTimeout <= 0 {
		o.RemoveTimeout = DefaultRemoveTimeout
	}
	if o.LogMaxBytes == 0 {
		o.LogMaxBytes = DefaultLogMaxBytes
	}
	if o.LogMaxFiles <= 0 {
		o.LogMaxFiles = DefaultLogMaxFiles
	}
	if o.LogCheckInterval <= 0 {
		o.LogCheckInterval = DefaultLogCheckInterval
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
}

// Runtime is a runtime.Runtime backed by containerd. Its methods are safe
// for concurrent use; operations on one container ID are serialised.
type Runtime struct {
	client   *ctrd.Client
	opts     Options
	log      *slog.Logger
	hosts    docker.RegistryHosts
	hostname string
	locks    keyedMutex

	stopRotator context.CancelFunc
	rotatorDone chan struct{}
	closed      atomic.Bool
	closeOnce   sync.Once
	closeErr    error
}

// New connects to containerd and checks that the snapshotter is usable.
// Close releases the connection; containers keep running.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	opts.ensureDefaults()
	client, err := ctrd.New(opts.Socket,
		ctrd.WithDefaultNamespace(opts.Namespace),
		ctrd.WithTimeout(opts.DialTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w", opts.Socket, err)
	}
	if opts.LogWriter != "" && !filepath.IsAbs(opts.LogWriter) {
		client.Close()
		return nil, fmt.Errorf("containerd runtime: log writer %q is not an absolute path", opts.LogWriter)
	}
	if err := checkDaemon(ctx, client, opts); err != nil {
		client.Close()
		return nil, err
	}
	hostname, err := os.Hostname()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("containerd runtime: hostname: %w", err)
	}
	hosts, err := registryHosts(opts.Registry)
	if err != nil {
		client.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Runtime{
		client:      client,
		opts:        opts,
		log:         opts.Logger.With("namespace", opts.Namespace),
		hosts:       hosts,
		hostname:    hostname,
		stopRotator: cancel,
		rotatorDone: make(chan struct{}),
	}
	go r.rotateLogs(rctx)
	return r, nil
}

// checkDaemon verifies that the daemon answers and has the snapshotter.
func checkDaemon(ctx context.Context, client *ctrd.Client, opts Options) error {
	if _, err := client.Version(ctx); err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", opts.Socket, err)
	}
	filter := fmt.Sprintf(`type=="io.containerd.snapshotter.v1",id==%q`, opts.Snapshotter)
	resp, err := client.IntrospectionService().Plugins(ctx, []string{filter})
	if err != nil {
		return fmt.Errorf("containerd runtime: list plugins: %w", err)
	}
	if len(resp.Plugins) == 0 {
		return fmt.Errorf("containerd runtime: snapshotter %q not found", opts.Snapshotter)
	}
	if ie := resp.Plugins[0].InitErr; ie != nil {
		return fmt.Errorf("containerd runtime: snapshotter %q unusable: %s", opts.Snapshotter, ie.Message)
	}
	return nil
}

// Close stops the log rotator and closes the connection to containerd.
// Running containers are not touched.
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		r.stopRotator()
		<-r.rotatorDone
		r.closeErr = r.client.Close()
	})
	return r.closeErr
}

// Namespace is the containerd namespace the runtime manages.
func (r *Runtime) Namespace() string { return r.opts.Namespace }

// Client is the underlying containerd client, for diagnostics and tests.
func (r *Runtime) Client() *ctrd.Client { return r.client }

// nsCtx puts the runtime's namespace on ctx, overriding any other.
func (r *Runtime) nsCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.opts.Namespace)
}

// keyedMutex serialises operations per key (container ID or image ref).
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// lock locks key and returns its unlock function.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()

	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
