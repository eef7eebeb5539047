package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/schema"
)

// AuditActionBackup is a backup: one taken through the API (POST
// /v1/backup), or a scheduled one that failed.
const AuditActionBackup = "backup"

// BackupRequest is the body of POST /v1/backup: how to encrypt the
// backup the hub streams back (a passphrase, or age recipients).
type BackupRequest struct {
	Passphrase string   `json:"passphrase,omitempty"`
	Recipients []string `json:"recipients,omitempty"`
}

// Trailers of POST /v1/backup's answer, sent after the file.
const (
	BackupTrailerRevision = "Fleet-Backup-Revision"
	BackupTrailerObjects  = "Fleet-Backup-Objects"
)

// backupSource is what a backup of this hub is made of.
func (h *Hub) backupSource() backup.Source {
	return backup.Source{Store: h.store, DataDir: h.opts.DataDir, TempDir: h.opts.DataDir}
}

// serveBackup streams an encrypted backup of the hub (POST /v1/backup,
// admin only): the store at one revision, taken while the hub serves,
// and the data directory's keys. A failure after the first byte cuts the
// stream, so the client never keeps a partial file as a backup.
func (h *Hub) serveBackup(w http.ResponseWriter, r *http.Request) {
	var req BackupRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		api.WriteError(w, r, h.log, &schema.ValidationError{Errors: []schema.FieldError{{Field: "body", Message: "want {\"passphrase\": …} or {\"recipients\": [\"age1…\"]}: " + err.Error()}}})
		return
	}
	key := backup.Key{Passphrase: req.Passphrase, Recipients: req.Recipients}
	if err := backup.CheckKey(key); err != nil {
		api.WriteError(w, r, h.log, &schema.ValidationError{Errors: []schema.FieldError{{Field: "passphrase", Message: err.Error()}}})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "fleet-backup-"+time.Now().UTC().Format("20060102T150405Z")+".age"))
	w.Header().Set("Trailer", BackupTrailerRevision+", "+BackupTrailerObjects)
	w.WriteHeader(http.StatusOK)
	start := time.Now()
	m, err := backup.Write(r.Context(), w, h.backupSource(), key)
	if err != nil {
		h.log.Error("backup through the API failed", "err", err)
		api.AuditRequest(r.Context(), schema.AuditEntry{Action: AuditActionBackup, Object: "backup", Result: "500", Detail: err.Error()})
		panic(http.ErrAbortHandler) // cut the stream: the client sees no complete file
	}
	objects, _ := json.Marshal(m.Objects)
	w.Header().Set(BackupTrailerRevision, strconv.FormatUint(m.Revision, 10))
	w.Header().Set(BackupTrailerObjects, string(objects))
	h.log.Info("backup streamed", "revision", m.Revision, "took", time.Since(start).Round(time.Millisecond))
	api.AuditRequest(r.Context(), schema.AuditEntry{Action: AuditActionBackup, Object: "backup",
		Detail: fmt.Sprintf("revision %d, objects %s", m.Revision, objects)})
}

// newBackupScheduler returns the scheduled backups (nil when
// opts.BackupDir is not set).
func (h *Hub) newBackupScheduler() (*backup.Scheduler, error) {
	o := h.opts
	if o.BackupDir == "" {
		return nil, nil
	}
	return backup.NewScheduler(backup.SchedulerOptions{
		Dir: o.BackupDir, Every: o.BackupEvery, Keep: o.BackupKeep, Key: o.BackupKey,
		Source: h.backupSource(), Clock: o.BackupClock,
		Logger:   h.log.With("component", "backup"),
		OnResult: h.backupDone,
	})
}

// backupDone records a scheduled backup in the metrics and, when it
// failed, in the audit trail.
func (h *Hub) backupDone(res backup.Result) {
	m := h.metrics.Backup
	if res.Err != nil {
		m.Failures.Inc()
		if h.api != nil {
			h.api.Audit(context.Background(), schema.AuditEntry{
				Actor: "fleet-hub", Action: AuditActionBackup, Object: "backups/" + h.opts.BackupDir,
				Result: "failed", Detail: res.Err.Error(),
			})
		}
		return
	}
	m.LastSuccess.Set(float64(res.Manifest.Created.UnixNano()) / 1e9)
	m.Duration.Set(res.Duration.Seconds())
	m.Size.Set(float64(res.Size))
}

// logRestore says, on start, that the store was restored from a backup
// and how many devices still wait to report (hub/controller, restore
// holds).
func (h *Hub) logRestore(ctx context.Context) {
	from, err := h.store.RestoredFrom(ctx)
	if err != nil || from == "" {
		return
	}
	held, err := h.store.RestoreHolds(ctx)
	if err != nil || held == 0 {
		return
	}
	h.log.Info("store restored from a backup: these devices are sent nothing until each reports the generation it runs, then continue above it",
		"backup", from, "devices_held", held)
}
