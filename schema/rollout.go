package schema

import "time"

// RolloutPhase is where a Staged rollout of one revision stands.
type RolloutPhase string

// The phases of a Staged rollout.
const (
	// RolloutProgressing: waves are going out, or wait for the devices of
	// the current step to become healthy, or for the step's pause.
	RolloutProgressing RolloutPhase = "Progressing"
	// RolloutPaused: an operator paused the deployment (spec.paused); no
	// step starts, failures are still counted.
	RolloutPaused RolloutPhase = "Paused"
	// RolloutComplete: every step is done and every targeted device is
	// given the revision. Final.
	RolloutComplete RolloutPhase = "Complete"
	// RolloutStopped: failures reached failureThreshold and nothing was
	// rolled back (autoRollback off, or no earlier revision completed);
	// the devices stay where they are. Final.
	RolloutStopped RolloutPhase = "Stopped"
	// RolloutRolledBack: failures reached failureThreshold and every
	// device was given the last good revision again. Final.
	RolloutRolledBack RolloutPhase = "RolledBack"
)

// Final reports whether nothing but a new revision moves a rollout in
// phase p.
func (p RolloutPhase) Final() bool {
	return p == RolloutComplete || p == RolloutStopped || p == RolloutRolledBack
}

// RolloutStatus is the state of a Deployment's Staged rollout, in its
// status (status.rollout): what "fleet rollout status" and "fleet describe"
// show. The counts are about the revision being rolled out.
type RolloutStatus struct {
	// Revision is the number of the revision being rolled out.
	Revision int64 `json:"revision"`
	// Hash is that revision's template hash, the hash devices report.
	Hash string `json:"hash"`
	// LastGoodRevision is the number of the last revision whose rollout
	// completed, which devices outside the waves run and a rollback
	// returns to; 0 when there is none (a first rollout).
	LastGoodRevision int64 `json:"lastGoodRevision,omitempty"`
	// Phase is where the rollout stands: Progressing, Paused, Complete,
	// Stopped or RolledBack.
	Phase RolloutPhase `json:"phase"`
	// Step is the current step, from 1.
	Step int `json:"step"`
	// Steps is how many steps the strategy has.
	Steps int `json:"steps"`
	// Targeted counts the devices the selector matches.
	Targeted int `json:"targeted"`
	// Updated counts the devices given the revision.
	Updated int `json:"updated"`
	// Ready counts the updated devices that are healthy: Ready for
	// minReadySeconds.
	Ready int `json:"ready"`
	// Failed counts the updated devices that failed the revision while
	// online (crash loop, image pull, or not Ready within
	// progressDeadlineSeconds).
	Failed int `json:"failed"`
	// Pending counts the rest: not given the revision yet, starting it,
	// or offline.
	Pending int `json:"pending"`
	// Waiting says in one line what the rollout waits for.
	Waiting string `json:"waiting,omitempty"`
	// WaitUntil is when that wait ends at the latest (absent: no bound,
	// such as an operator's pause).
	WaitUntil time.Time `json:"waitUntil,omitzero"`
	// Reason says in one line why the rollout stopped or rolled back.
	Reason string `json:"reason,omitempty"`
	// StartedAt is when the rollout of this revision started.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// FinishedAt is when its phase became final.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Events are the rollout's most recent transitions (a wave starting,
	// a pause, completion, a stop or a rollback), oldest first.
	Events []RolloutEvent `json:"events,omitempty"`
	// RolledBackFrom is set when this revision is the hub's automatic
	// rollback of a failed one: which one, and why. The rollback is
	// written as "fleet rollout undo" writes it, so the current revision
	// names what the devices run.
	RolledBackFrom *AutoRollback `json:"rolledBackFrom,omitempty"`
}

// AutoRollback is a Staged rollout that failed and that the hub rolled
// back by itself, giving the deployment the last good revision's
// template again (under a new number, the current revision).
type AutoRollback struct {
	// Revision is the number of the revision that failed; the history
	// keeps it, marked Failed with Reason.
	Revision int64 `json:"revision"`
	// Hash is its pod template hash.
	Hash string `json:"hash,omitempty"`
	// ToRevision is the number the last good revision had when it was
	// rolled back to.
	ToRevision int64 `json:"toRevision,omitempty"`
	// Step is the step, from 1, at which the failed rollout stopped.
	Step int `json:"step,omitempty"`
	// Steps is how many steps its strategy had.
	Steps int `json:"steps,omitempty"`
	// Reason says why, in one line.
	Reason string `json:"reason"`
	// At is when the failed rollout was rolled back.
	At time.Time `json:"at,omitzero"`
}

// RolloutEvent is one transition of a Staged rollout.
type RolloutEvent struct {
	// Time is when it happened.
	Time time.Time `json:"time"`
	// Type is Normal, or Warning for a stop or a rollback.
	Type string `json:"type"`
	// Reason is one word: WaveStarted, Paused, Resumed, Complete, Stopped,
	// RolledBack.
	Reason string `json:"reason"`
	// Message says what happened, in one line.
	Message string `json:"message"`
}

// MaxRolloutEvents is how many RolloutEvents a rollout keeps.
const MaxRolloutEvents = 10

// DeploymentCondition is one aspect of a Deployment's state, as
// Kubernetes' conditions: Type Progressing says whether its rollout is
// moving (True) or has stopped (False), and Reason and Message say why.
type DeploymentCondition struct {
	// Type is the aspect: Progressing.
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status string `json:"status"`
	// Reason is one word: RolloutProgressing, RolloutPaused,
	// RolloutComplete, RolloutStopped or RolloutRolledBack.
	Reason string `json:"reason"`
	// Message says why, in one line.
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Status or Reason last changed.
	LastTransitionTime time.Time `json:"lastTransitionTime,omitzero"`
}

// ConditionProgressing is the DeploymentCondition type of a rollout.
const ConditionProgressing = "Progressing"
