package selfupdate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/schema"
)

// BinaryPath is where an agent image holds the binary.
const BinaryPath = "/fleet-agent"

// Fetcher gets a file out of an image: the containerd runtime pulls the
// image as it pulls a pod's (registry, mirrors, credentials) and copies
// the file from its layers for this platform.
type Fetcher interface {
	ReadImageFile(ctx context.Context, image, path string, w io.Writer) (int64, error)
}

// Options configure an Updater. Layout, StateDir, Version and Fetcher are
// required.
type Options struct {
	Layout   Layout
	StateDir string
	// Version is the running agent's release.
	Version string
	Fetcher Fetcher
	// Exe is the running binary (default os.Executable): the agent
	// replaces itself only when it is what Layout's current names.
	Exe    string
	Logger *slog.Logger
	// OnChange is called (never under a lock) when Status changes.
	OnChange func()
	// Retry paces fetches that fail for a reason other than the digest
	// (default 5 s doubling to 5 min).
	Retry backoff.Policy
	// Now is the clock of the record's times (default time.Now).
	Now func() time.Time
	// InTrial says this process is the agent in trial: it reports the
	// trial and touches neither the layout nor the record.
	InTrial bool
}

// Staged is a binary staged as next, for Trial.
type Staged struct {
	Version, Digest, Previous string
}

// Updater follows desiredState.agent: it fetches, verifies and stages the
// named release, and says (Ready) when the agent is to stop for its
// trial. It never runs the trial itself: the process does (Trial), once
// the agent's work is stopped.
type Updater struct {
	o     Options
	log   *slog.Logger
	kick  chan struct{}
	ready chan Staged

	mu      sync.Mutex
	desired *schema.DesiredAgent
	have    bool // desired was set at least once
	rec     *Record
}

// New reads the record and settles what a previous process left: a trial
// whose version is this agent's passed (Updated); a trial of another
// version was interrupted (tried again, MaxTrials at most).
func New(o Options) (*Updater, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Retry == (backoff.Policy{}) {
		o.Retry = backoff.Policy{Initial: 5 * time.Second, Max: 5 * time.Minute, Jitter: 0.2}
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("selfupdate: %w", err)
		}
		o.Exe = exe
	}
	u := &Updater{o: o, log: o.Logger.With("part", "selfupdate"), kick: make(chan struct{}, 1), ready: make(chan Staged, 1)}
	if o.InTrial {
		return u, nil
	}
	rec, err := LoadRecord(o.StateDir)
	if err != nil {
		u.log.Warn("agent upgrade record unusable; starting afresh", "err", err)
		rec = nil
	}
	u.rec = rec
	return u, u.settle()
}

// settle applies what the record says about the last process.
func (u *Updater) settle() error {
	rec := u.rec
	if rec == nil || rec.Phase != schema.AgentUpgradeTrial {
		if err := u.o.Layout.ClearNext(); err != nil && u.o.Layout.Check(u.o.Exe) == nil {
			return fmt.Errorf("selfupdate: %w", err)
		}
		return nil
	}
	if err := u.o.Layout.ClearNext(); err != nil {
		return fmt.Errorf("selfupdate: %w", err)
	}
	if rec.Version == u.o.Version {
		rec.Phase, rec.Time = schema.AgentUpgradeUpdated, u.o.Now().UTC()
		rec.Message = fmt.Sprintf("%s passed its trial and replaced %s", rec.Version, rec.Previous)
		u.log.Info("agent upgraded", "version", rec.Version, "previous", rec.Previous)
		if err := u.o.Layout.Prune(rec.Previous); err != nil {
			u.log.Warn("old agent binaries not pruned", "err", err)
		}
	} else if rec.Trials >= MaxTrials {
		u.fail(rec, fmt.Sprintf("the trial of %s was interrupted %d times (the agent killed, or a power cut, during it); %s runs", rec.Version, rec.Trials, u.o.Version))
	} else {
		rec.Message = fmt.Sprintf("the trial of %s was interrupted; trying again", rec.Version)
		u.log.Warn(rec.Message, "trials", rec.Trials)
	}
	return SaveRecord(u.o.StateDir, rec)
}

func (u *Updater) fail(rec *Record, msg string) {
	rec.Phase, rec.Message, rec.Time = schema.AgentUpgradeFailed, msg, u.o.Now().UTC()
	u.log.Error("agent upgrade failed", "version", rec.Version, "reason", msg)
}

// Desired hands the Updater the agent the latest desired state names
// (nil: none).
func (u *Updater) Desired(d *schema.DesiredAgent) {
	u.mu.Lock()
	if d != nil {
		c := *d
		d = &c
	}
	u.desired, u.have = d, true
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Status is status.agent.upgrade.
func (u *Updater) Status() *schema.AgentUpgradeStatus {
	if u.o.InTrial {
		return &schema.AgentUpgradeStatus{Version: u.o.Version, Phase: schema.AgentUpgradeTrial, Message: "in trial: the previous agent waits for this one to report"}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rec.Status()
}

// Ready delivers the binary staged as next once: the agent is to stop its
// work and the process to run Trial.
func (u *Updater) Ready() <-chan Staged { return u.ready }

// Run follows the desired agent until ctx is done or a binary is staged
// (then it returns nil after sending it on Ready).
func (u *Updater) Run(ctx context.Context) error {
	if u.o.InTrial {
		<-ctx.Done()
		return nil
	}
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-u.kick:
		case <-retry:
		}
		retry = nil
		staged, err := u.step(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			d := u.o.Retry.Delay(failures)
			u.note(fmt.Sprintf("%v; retrying in %v", err, d.Round(time.Second)))
			retry = time.After(d)
			continue
		case staged != nil:
			u.ready <- *staged
			return nil
		}
		failures = 0
	}
}

// note sets the message of a Downloading record.
func (u *Updater) note(msg string) {
	u.mu.Lock()
	if u.rec != nil && u.rec.Phase == schema.AgentUpgradeDownloading {
		u.rec.Message = msg
	}
	u.mu.Unlock()
	u.log.Warn("agent upgrade: fetch failed", "err", msg)
	u.changed()
}

func (u *Updater) changed() {
	if u.o.OnChange != nil {
		u.o.OnChange()
	}
}

// step acts once on the desired agent. A retryable failure is an error;
// a terminal one is recorded as Failed.
func (u *Updater) step(ctx context.Context) (*Staged, error) {
	u.mu.Lock()
	d, have, rec := u.desired, u.have, u.rec
	u.mu.Unlock()
	if !have {
		return nil, nil
	}
	if d == nil || d.Version == u.o.Version {
		// Nothing to replace: forget all but the report of the upgrade
		// that made this agent.
		if rec != nil && !(rec.Phase == schema.AgentUpgradeUpdated && rec.Version == u.o.Version) {
			u.setRecord(nil)
		}
		return nil, nil
	}
	if rec != nil && rec.Version == d.Version && rec.Digest == d.Digest && rec.Phase == schema.AgentUpgradeFailed {
		return nil, nil // not again until the desired state names another
	}
	next := &Record{Version: d.Version, Digest: d.Digest, Previous: u.o.Version, Phase: schema.AgentUpgradeDownloading, Time: u.o.Now().UTC()}
	if rec != nil && rec.Version == d.Version && rec.Digest == d.Digest {
		next.Trials = rec.Trials
	}
	if msg := u.refusal(d); msg != "" {
		u.fail(next, msg)
		u.setRecord(next)
		return nil, nil
	}
	if !u.o.Layout.Staged(d.Version, d.Digest) {
		next.Message = "pulling " + d.Image
		u.setRecord(next)
		u.log.Info("pulling the new agent release", "version", d.Version, "image", d.Image)
		start := time.Now()
		n, err := u.fetch(ctx, d)
		if errors.Is(err, ErrDigest) {
			u.fail(next, fmt.Sprintf("refused the binary of %s from %s: %v", d.Version, d.Image, err))
			u.setRecord(next)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		u.log.Info("agent binary staged", "version", d.Version, "image", d.Image, "bytes", n, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := u.o.Layout.SetNext(d.Version); err != nil {
		return nil, err
	}
	next.Trials++
	next.Phase, next.Message, next.Time = schema.AgentUpgradeTrial, "starting the trial of "+d.Version, u.o.Now().UTC()
	if err := u.saveRecord(next); err != nil {
		return nil, err
	}
	return &Staged{Version: d.Version, Digest: d.Digest, Previous: u.o.Version}, nil
}

// refusal says why d cannot be tried at all ("" when it can).
func (u *Updater) refusal(d *schema.DesiredAgent) string {
	switch {
	case checkVersion(d.Version) != nil:
		return fmt.Sprintf("refused: %v", checkVersion(d.Version))
	case d.Digest == "":
		return fmt.Sprintf("refused %s: the desired state names no digest for %s, and an unverified binary is never run (give the rollout spec.artifacts)", d.Version, goruntime.GOARCH)
	case d.Image == "":
		return fmt.Sprintf("refused %s: the desired state names no image to get it from", d.Version)
	}
	if err := u.o.Layout.Check(u.o.Exe); err != nil {
		return fmt.Sprintf("cannot replace itself with %s: %v", d.Version, err)
	}
	return ""
}

func (u *Updater) fetch(ctx context.Context, d *schema.DesiredAgent) (int64, error) {
	pr, pw := io.Pipe()
	type result struct {
		n   int64
		err error
	}
	staged := make(chan result, 1)
	go func() {
		n, err := u.o.Layout.Stage(d.Version, d.Digest, pr)
		pr.CloseWithError(err) // unblocks the fetch if staging stopped early
		staged <- result{n, err}
	}()
	_, ferr := u.o.Fetcher.ReadImageFile(ctx, d.Image, BinaryPath, pw)
	pw.CloseWithError(ferr)
	res := <-staged
	if ferr != nil && !errors.Is(res.err, ErrDigest) {
		return 0, fmt.Errorf("get %s from %s: %w", BinaryPath, d.Image, ferr)
	}
	return res.n, res.err
}

// setRecord keeps rec and writes it (a failure to write is logged: the
// report still goes out).
func (u *Updater) setRecord(rec *Record) {
	if err := u.saveRecord(rec); err != nil {
		u.log.Error("agent upgrade record not written", "err", err)
	}
}

func (u *Updater) saveRecord(rec *Record) error {
	u.mu.Lock()
	u.rec = rec
	u.mu.Unlock()
	defer u.changed()
	return SaveRecord(u.o.StateDir, rec)
}

// Fail records that the trial of s failed, for the previous agent to
// report once the process runs it again; the record's count of trials
// is kept.
func Fail(stateDir string, s Staged, reason string, now time.Time) error {
	trials := 1
	if rec, err := LoadRecord(stateDir); err == nil && rec != nil && rec.Version == s.Version && rec.Digest == s.Digest {
		trials = rec.Trials
	}
	return SaveRecord(stateDir, &Record{Version: s.Version, Digest: s.Digest, Previous: s.Previous,
		Phase: schema.AgentUpgradeFailed, Message: reason, Trials: trials, Time: now.UTC()})
}
