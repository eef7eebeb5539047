package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/schema"
)

// phaseRestore is an opt-in phase (-phases …,restore), run last: it
// replaces the hub's data directory.
const phaseRestore = "restore"

// restorePassphrase encrypts the phase's backup.
const restorePassphrase = "scale suite restore phase"

// restore (issue 41): an online backup of the converged fleet through the
// API; a change applied after it, which every device runs (so each is a
// generation ahead of the backup); the hub SIGKILLed and restored from the
// backup into a new data directory, started on the same addresses (the
// agents' broker URL standing for a DNS name). Measured: the backup's time
// and size, the restore's, and from the restored hub's start until every
// device reported the backup's pod ready again (the restored hub holds
// each device until its report, then continues above its generation) and
// the hub's API agreed.
func (s *suite) restore(ctx context.Context) Result {
	r := s.result(phaseRestore)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	ctx, cancel := context.WithTimeout(ctx, s.deadline(120*time.Second, 10*time.Millisecond))
	defer cancel()
	hash := podHash(s.convergeDep)
	var file bytes.Buffer
	start := time.Now()
	res, err := s.hub.Client.Backup(ctx, client.BackupRequest{Passphrase: restorePassphrase}, &file)
	if err != nil {
		return fail(fmt.Errorf("backup: %w", err))
	}
	r.ApplyMS = ms(time.Since(start)) // the backup's duration
	s.log.Info("backup taken", "revision", res.Revision, "bytes", res.Bytes, "took", time.Since(start).Round(time.Millisecond))

	// After the backup: every device moves on to a pod the backup never saw.
	later := *s.convergeDep
	later.Spec.Template.Spec.Containers = append([]schema.Container(nil), later.Spec.Template.Spec.Containers...)
	later.Spec.Template.Spec.Containers[0].Env = append(append([]schema.EnvVar(nil), later.Spec.Template.Spec.Containers[0].Env...), schema.EnvVar{Name: "AFTER_BACKUP", Value: "1"})
	body, err := manifest(&later)
	if err != nil {
		return fail(err)
	}
	w := s.mon.start(-1, false, func(st *statusLite) bool { return st.ready(convergeDeployment, podHash(&later)) })
	if _, err := s.hub.Client.Apply(ctx, body, false); err != nil {
		return fail(fmt.Errorf("apply after the backup: %w", err))
	}
	s.mon.setOrigin(w, time.Now())
	if _, _, err := s.mon.wait(ctx, w); err != nil {
		return fail(fmt.Errorf("the change after the backup: %w", err))
	}
	before, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}

	// The machine dies; a new data directory from the backup.
	if err := s.hub.stop(syscall.SIGKILL, 30*time.Second); err != nil {
		return fail(err)
	}
	dir := filepath.Join(s.dir, "hub-restored")
	start = time.Now()
	if _, err := backup.Restore(ctx, bytes.NewReader(file.Bytes()), backup.Key{Passphrase: restorePassphrase}, backup.RestoreOptions{DataDir: dir}); err != nil {
		return fail(fmt.Errorf("restore: %w", err))
	}
	restoreTook := time.Since(start)
	var startedNS atomic.Int64
	w = s.mon.start(-1, true, func(st *statusLite) bool {
		at := startedNS.Load()
		return at != 0 && st.Time.UnixNano() > at && st.ready(convergeDeployment, hash)
	})
	s.hub.spec.DataDir = dir
	started := time.Now()
	startedNS.Store(started.UnixNano())
	s.mon.setOrigin(w, started)
	if err := s.hub.start(ctx, s.deadline(60*time.Second, time.Millisecond)); err != nil {
		return fail(fmt.Errorf("start the restored hub: %w", err))
	}
	r.RestartMS = ms(time.Since(started))
	lat, _, werr := s.mon.wait(ctx, w)
	r.fill(lat)
	r.WallMS = r.MaxMS
	if werr != nil {
		return fail(fmt.Errorf("%d of %d devices converged on the restored hub: %w", r.Samples, len(lat), werr))
	}
	at, _, err := s.awaitHub(ctx, func(d *schema.Device) bool {
		return d.Status != nil && d.Status.Online && d.Status.Converged && d.Status.LastSeen != nil && d.Status.LastSeen.After(started)
	})
	if err != nil {
		return fail(fmt.Errorf("hub confirmation: %w", err))
	}
	r.HubConfirmMS = ms(at.Sub(started))
	after, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	// Each device replaces its pod once (back to the backup's): more is
	// redundant.
	r.RedundantRestarts = after.Starts - before.Starts - len(s.names)
	r.Target = "every device back on the backup's pod, lost 0, redundant 0"
	r.OK = r.Lost == 0 && r.RedundantRestarts <= 0
	s.log.Info("restore phase", "backup_bytes", res.Bytes, "restore", restoreTook.Round(time.Millisecond),
		"restored_hub_start_to_all_converged", time.Duration(r.WallMS*float64(time.Millisecond)).Round(time.Millisecond))
	fmt.Printf("restore phase: backup %d bytes in %.0f ms; restore %v; restored hub up in %.0f ms; all %d devices converged %.0f ms after its start (p50 %.0f ms, p99 %.0f ms); hub API agreed at %.0f ms; redundant starts %d\n",
		res.Bytes, r.ApplyMS, restoreTook.Round(time.Millisecond), r.RestartMS, len(s.names), r.WallMS, r.P50MS, r.P99MS, r.HubConfirmMS, r.RedundantRestarts)
	return r
}
