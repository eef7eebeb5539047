package selfupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// RecordFile is the record of the agent's own upgrade, in the state dir.
const RecordFile = "agent-upgrade.json"

// MaxTrials is how many trials of one version and digest a device starts:
// a trial interrupted by a power cut (or a kill of the agent) is tried
// again once; a second interruption fails the version, so a binary that
// takes the device down with it is not tried for ever.
const MaxTrials = 2

// Record is what the agent keeps about its own upgrade across restarts,
// execs and power cuts. Written atomically and fsynced.
type Record struct {
	// Version and Digest are the release the upgrade is about.
	Version string `json:"version"`
	Digest  string `json:"digest,omitempty"`
	// Previous is the release that ran when the upgrade began.
	Previous string                   `json:"previous,omitempty"`
	Phase    schema.AgentUpgradePhase `json:"phase"`
	Message  string                   `json:"message,omitempty"`
	// Trials counts the trials started of Version and Digest.
	Trials int       `json:"trials,omitempty"`
	Time   time.Time `json:"time"`
}

// Status is the record as status.agent.upgrade reports it.
func (r *Record) Status() *schema.AgentUpgradeStatus {
	if r == nil {
		return nil
	}
	return &schema.AgentUpgradeStatus{Version: r.Version, Phase: r.Phase, Message: r.Message, Previous: r.Previous, Time: r.Time}
}

// LoadRecord reads dir's record: nil, nil when there is none; an
// unreadable record is an error (the caller starts afresh).
func LoadRecord(dir string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", RecordFile, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read %s: %w", RecordFile, err)
	}
	return &r, nil
}

// SaveRecord writes r into dir atomically (a fsynced file renamed into
// place); nil removes the record.
func SaveRecord(dir string, r *Record) error {
	path := filepath.Join(dir, RecordFile)
	if r == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", RecordFile, err)
		}
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("write %s: %w", RecordFile, err)
	}
	tmp, err := os.CreateTemp(dir, "."+RecordFile+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", RecordFile, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", RecordFile, err)
	}
	return syncDir(dir)
}
