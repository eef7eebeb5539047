package mosquitto

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of the Mosquitto file sync.
const (
	// DefaultDebounce is how long the sync waits for more
	// changes after one, so that `fleet device add` (a device, then its
	// token) or a batch of changes is one rewrite and one reload.
	DefaultDebounce = 200 * time.Millisecond
	// maxDelay bounds the wait of a change under a stream of
	// others.
	maxDelay = 2 * time.Second
	// DefaultResync is how often the files are checked against
	// the store even without a change (a reload that failed is retried
	// then, and a file edited by hand is put back).
	DefaultResync = time.Minute
)

// accountRoutes are the API routes whose writes change MQTT accounts
// without a device being added or deleted and without replacing a token
// (which the store reports itself): a device's first token, monitor
// credentials, bootstrap tokens.
var accountRoutes = map[string]bool{
	"/v1/devices/{name}/token":  true,
	"/v1/credentials":           true,
	"/v1/credentials/{name}":    true,
	"/v1/bootstrap-tokens":      true,
	"/v1/bootstrap-tokens/{id}": true,
}

// FileSync keeps an external Mosquitto's password and ACL files (in
// dir, named passwd and acl as `fleet-hub mosquitto-config --out` names
// them) equal to what the store says, and makes Mosquitto reload them
// (SIGHUP to the process in pidFile) whenever they change. It is
// level-based: every sync renders both files from the whole store and
// compares them with what is on disk, so a missed trigger costs only
// time until the next one or the periodic resync.
type FileSync struct {
	st       *store.Store
	topics   schema.Topics
	hub      broker.MosquittoAccount
	dir      string
	pidFile  string
	debounce time.Duration
	resync   time.Duration
	log      *slog.Logger
	// signal sends SIGHUP to pid; tests replace it.
	signal func(pid int) error

	wake chan struct{}
	// hubHash is the hub account's line, kept across renders: a
	// password hash is salted, so a fresh one would differ every time.
	hubHash string
	// reloadPending: the files changed but Mosquitto could not be
	// signalled; the next sync tries again.
	reloadPending bool
}

// NewFileSync returns the sync of the files in dir for the store's
// accounts and the hub's own (hub), signalling the Mosquitto whose
// pid_file is pidFile ("": none, the operator reloads it). Start or Run
// it next.
func NewFileSync(st *store.Store, topics schema.Topics, hub broker.MosquittoAccount, dir, pidFile string, log *slog.Logger) *FileSync {
	return &FileSync{
		st: st, topics: topics, hub: hub, dir: dir, pidFile: pidFile,
		debounce: DefaultDebounce, resync: DefaultResync,
		log: log, signal: sighup, wake: make(chan struct{}, 1),
	}
}

// Trigger asks for a sync soon; it never blocks.
func (m *FileSync) Trigger() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// ObserveRequest triggers a sync after a successful request on a route
// that changes accounts (an api.Options.ObserveRequest, less the time).
func (m *FileSync) ObserveRequest(route string, code int) {
	if code < 300 && accountRoutes[route] {
		m.Trigger()
	}
}

// Run syncs on every trigger (debounced), on every device added or
// deleted, and every resync interval, until ctx is done.
func (m *FileSync) Run(ctx context.Context) error {
	var watching sync.WaitGroup
	defer watching.Wait() // the watch ends with ctx
	watching.Go(func() { m.watchDevices(ctx) })
	resync := time.NewTicker(m.resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
		case <-m.wake:
			if !m.settle(ctx) {
				return nil
			}
		}
		if _, err := m.Sync(ctx); err != nil && ctx.Err() == nil {
			m.log.Error("mosquitto files not updated; retrying at the next change or in a minute", "dir", m.dir, "err", err)
		}
	}
}

// settle waits until no trigger has come for the debounce interval, or
// maxDelay has passed. It reports false if ctx ended.
func (m *FileSync) settle(ctx context.Context) bool {
	limit := time.NewTimer(maxDelay)
	defer limit.Stop()
	quiet := time.NewTimer(m.debounce)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-limit.C:
			return true
		case <-quiet.C:
			return true
		case <-m.wake:
			quiet.Reset(m.debounce)
		}
	}
}

// watchDevices triggers a sync for every device added or deleted (an
// enrollment creates a device and its token at once).
func (m *FileSync) watchDevices(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := m.st.Revision(ctx)
		var events <-chan store.Event
		if err == nil {
			events, err = m.st.Watch(ctx, schema.KindDevice, rev)
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
				m.log.Warn("mosquitto sync: cannot watch devices; relying on the periodic resync", "err", err)
			}
			return
		}
		// A change between the last sync and the watch (and, after a
		// watch that ended because it fell behind, the ones it missed).
		m.Trigger()
		for ev := range events {
			if ev.Type == store.EventAdded || ev.Type == store.EventDeleted {
				m.Trigger()
			}
		}
	}
}

// Sync renders the files and, if either differs from the one on disk,
// replaces it (atomically) and signals Mosquitto. It reports whether
// anything was written.
func (m *FileSync) Sync(ctx context.Context) (bool, error) {
	passwdPath, aclPath := filepath.Join(m.dir, "passwd"), filepath.Join(m.dir, "acl")
	if m.hubHash == "" {
		h, err := m.currentHubHash(passwdPath)
		if err != nil {
			return false, err
		}
		m.hubHash = h
	}
	passwd, acl, warnings, err := render(ctx, m.st, m.topics, m.hub.Name, m.hubHash)
	if err != nil {
		return false, fmt.Errorf("mosquitto files: %w", err)
	}
	for _, w := range warnings {
		m.log.Warn("mosquitto files: " + w)
	}
	changed := false
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{passwdPath, passwd, 0o600}, {aclPath, acl, 0o644}} {
		old, err := os.ReadFile(f.path)
		if err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("mosquitto files: cannot read the current file; replacing it", "path", f.path, "err", err)
		}
		if err := store.WriteFileAtomic(f.path, f.data, f.mode); err != nil {
			return changed, fmt.Errorf("write %s: %w", f.path, err)
		}
		changed = true
	}
	if !changed && !m.reloadPending {
		m.log.Debug("mosquitto files up to date", "dir", m.dir)
		return false, nil
	}
	accounts := bytes.Count(passwd, []byte("\n")) - 1 // the header comment
	if m.pidFile == "" {
		m.log.Info("mosquitto files rewritten; reload Mosquitto (SIGHUP) to apply them, or give --mosquitto-pid-file",
			"dir", m.dir, "accounts", accounts)
		return changed, nil
	}
	pid, err := readPIDFile(m.pidFile)
	if err == nil {
		err = m.signal(pid)
	}
	if err != nil {
		m.reloadPending = true
		return changed, &reloadError{fmt.Errorf("mosquitto files rewritten in %s, but Mosquitto not reloaded: %w", m.dir, err)}
	}
	m.reloadPending = false
	m.log.Info("mosquitto files rewritten and Mosquitto reloaded", "dir", m.dir, "accounts", accounts, "pid", pid, "signal", "SIGHUP")
	return changed, nil
}

// currentHubHash returns the hub account's hash from the password file on
// disk if it is the hash of the hub's password, else a new one.
func (m *FileSync) currentHubHash(passwdPath string) (string, error) {
	if f, err := os.Open(passwdPath); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			name, hash, ok := strings.Cut(sc.Text(), ":")
			if ok && name == m.hub.Name && broker.MosquittoPasswordMatches(hash, m.hub.Password) {
				return hash, nil
			}
		}
	}
	return broker.MosquittoPasswordHash(m.hub.Password)
}

// readPIDFile reads the process ID Mosquitto wrote (pid_file).
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("mosquitto pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("mosquitto pid file %s: %q is not a process ID", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// sighup sends SIGHUP to pid.
func sighup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return fmt.Errorf("signal mosquitto (pid %d): %w", pid, err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("signal mosquitto (pid %d): %w", pid, err)
	}
	return nil
}

// Start writes the files once (an error there is a setup error: the
// directory cannot be written) and runs the sync on parts until ctx ends.
// Failing to signal Mosquitto is only logged: it may not run yet.
func (m *FileSync) Start(ctx context.Context, parts *sync.WaitGroup) error {
	if _, err := m.Sync(ctx); err != nil {
		var reload *reloadError
		if !errors.As(err, &reload) {
			return err
		}
		m.log.Warn("mosquitto files written; Mosquitto not reloaded (not running yet?)", "err", err)
	}
	parts.Go(func() { _ = m.Run(ctx) })
	return nil
}

// reloadError: the files were written, Mosquitto was not signalled.
type reloadError struct{ err error }

func (e *reloadError) Error() string { return e.err.Error() }
func (e *reloadError) Unwrap() error { return e.err }
