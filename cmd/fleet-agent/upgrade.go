package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/edgeagent"
	"github.com/fleetmq/fleet/edgeagent/selfupdate"
	"github.com/fleetmq/fleet/schema"
)

// upgrade is the agent's own upgrade in this process: the Updater while
// the agent runs; once a release is staged, its trial and the exec of
// whichever binary is current after it.
type upgrade struct {
	layout         selfupdate.Layout
	stateDir       string
	deadline       time.Duration
	log            *slog.Logger
	stdout, stderr io.Writer

	trial *selfupdate.Reporter // set in an agent in trial
	up    *selfupdate.Updater  // nil when unusable
	agent atomic.Pointer[edgeagent.Agent]
}

// newUpgrade prepares the upgrade of this process. An Updater that
// cannot start (a broken record, say) is logged and left out: the agent
// runs on, it only cannot replace itself.
func newUpgrade(cfg config, log *slog.Logger, stdout, stderr io.Writer, fetcher selfupdate.Fetcher) (*upgrade, error) {
	trial, err := selfupdate.TrialReporter()
	if err != nil {
		return nil, err
	}
	deadline, err := cfg.trialDeadline()
	if err != nil {
		return nil, err
	}
	u := &upgrade{layout: selfupdate.Layout{Dir: cfg.UpgradeDir}, stateDir: cfg.StateDir, deadline: deadline,
		log: log, stdout: stdout, stderr: stderr, trial: trial}
	if trial != nil {
		log.Info("this agent runs in a trial: the previous one waits for it to connect and report", "version", schema.BuildVersion())
	}
	up, err := selfupdate.New(selfupdate.Options{
		Layout: u.layout, StateDir: cfg.StateDir, Version: schema.BuildVersion(), Fetcher: fetcher,
		Logger: log, InTrial: trial != nil, OnChange: u.changed,
	})
	if err != nil {
		log.Error("the agent cannot replace itself; it runs on", "err", err)
		return u, nil
	}
	u.up = up
	return u, nil
}

// options hands the agent the Updater and the trial's hooks.
func (u *upgrade) options(o *edgeagent.Options) {
	if u.up != nil {
		o.Upgrade = u.up
	}
	if u.trial != nil {
		o.Trial = u.trial
	}
}

func (u *upgrade) changed() {
	if a := u.agent.Load(); a != nil {
		a.StatusChanged()
	}
}

// run runs agent until ctx is done, or until a new release is staged:
// then the agent stops (its containers keep running), the release runs
// in a trial, and the process executes current, the new release if it
// passed, else the previous one, which reports why.
func (u *upgrade) run(ctx context.Context, agent *edgeagent.Agent) error {
	u.agent.Store(agent)
	actx, stop := context.WithCancel(ctx)
	defer stop()
	var staged *selfupdate.Staged
	var wg sync.WaitGroup
	if u.up != nil {
		wg.Go(func() { _ = u.up.Run(actx) })
		wg.Go(func() {
			select {
			case s := <-u.up.Ready():
				staged = &s
				u.log.Info("new agent release staged: stopping for its trial (containers keep running)", "version", s.Version)
				stop()
			case <-actx.Done():
			}
		})
	}
	err := agent.Run(actx)
	stop()
	wg.Wait()
	if staged == nil || ctx.Err() != nil {
		return err
	}
	if err != nil {
		u.log.Warn("agent stopped with an error before the trial", "err", err)
	}
	return u.switchTo(ctx, *staged)
}

// switchTo runs the trial of s and executes current.
func (u *upgrade) switchTo(ctx context.Context, s selfupdate.Staged) error {
	res, err := selfupdate.Trial(ctx, selfupdate.TrialOptions{
		Layout: u.layout, StateDir: u.stateDir, Staged: s, Args: os.Args[1:],
		Deadline: u.deadline, Stdout: u.stdout, Stderr: u.stderr, Logger: u.log,
	})
	if err != nil {
		return err // stopped during the trial: the next start counts it
	}
	u.log.Info("agent trial over", "version", s.Version, "passed", res.Passed, "reason", res.Reason,
		"connected_after", res.Connected.Round(time.Millisecond), "reported_after", res.Reported.Round(time.Millisecond),
		"trial_max_rss_bytes", res.MaxRSS)
	return selfupdate.Exec(u.layout, os.Args[1:], os.Environ())
}
