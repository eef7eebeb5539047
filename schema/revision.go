package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// KindDeploymentRevision is the kind of a DeploymentRevision.
const KindDeploymentRevision = "DeploymentRevision"

// Annotations Fleet reads or writes.
const (
	// AnnotationChangeCause on a Deployment says why its pod template
	// changed; the hub records it in the revision the change creates
	// ("fleet rollout history" shows it). Kubernetes' name.
	AnnotationChangeCause = "kubernetes.io/change-cause"
	// AnnotationFleetChangeCause is accepted as well, when
	// AnnotationChangeCause is not set.
	AnnotationFleetChangeCause = "fleet/change-cause"
	// AnnotationRestartedAt on a pod template is set by "fleet rollout
	// restart" to the time of the restart: a new template, so every device
	// restarts the pod, per the deployment's strategy.
	AnnotationRestartedAt = "fleet/restartedAt"
	// AnnotationUpdateNow on a Deployment names the pod template hash
	// that devices take at once, skipping spec.updateWindow: "fleet
	// rollout restart --now" sets it (an emergency; the write is in the
	// audit trail like any other).
	AnnotationUpdateNow = "fleet/updateNow"
)

// Revision history limits (spec.revisionHistoryLimit).
const (
	// DefaultRevisionHistoryLimit is how many revisions a Deployment keeps
	// when spec.revisionHistoryLimit is not set.
	DefaultRevisionHistoryLimit = 10
	// MaxRevisionHistoryLimit is the largest spec.revisionHistoryLimit.
	MaxRevisionHistoryLimit = 100
)

// RevisionOutcome is how a revision's rollout ended.
type RevisionOutcome string

// The outcomes of a revision.
const (
	// OutcomeComplete: every targeted device ran the revision ready.
	OutcomeComplete RevisionOutcome = "Complete"
	// OutcomeFailed: the revision's rollout failed.
	OutcomeFailed RevisionOutcome = "Failed"
	// OutcomeRolledBack: the deployment was rolled back from the revision.
	OutcomeRolledBack RevisionOutcome = "RolledBack"
)

// DeploymentRevision is one numbered version of a Deployment's pod
// template, kept by the hub: each change of spec.template makes one, and
// "fleet rollout undo" goes back to one. Read-only: the hub writes them.
type DeploymentRevision struct {
	TypeMeta `json:",inline"`
	// Deployment is the name of the deployment the revision belongs to.
	Deployment string `json:"deployment"`
	// Revision numbers the revision: 1 for the deployment's first
	// template, one more for each change. Going back to an older template
	// makes it the newest revision again, under a new number.
	Revision int64 `json:"revision"`
	// Template is the deployment's pod template at this revision.
	Template PodTemplate `json:"template"`
	// Hash is the hash of the template devices run (TemplateHash): the
	// spec hash "fleet get pods" and device reports show.
	Hash string `json:"hash"`
	// CreatedAt is when the hub stored the revision, an RFC 3339 time.
	CreatedAt time.Time `json:"createdAt"`
	// ChangeCause says why the template changed: the deployment's
	// kubernetes.io/change-cause (or fleet/change-cause) annotation at the
	// time, else who applied it, as "by NAME (ROLE)".
	ChangeCause string `json:"changeCause,omitempty"`
	// Outcome is how the revision's rollout ended: Complete, Failed or
	// RolledBack; empty while unknown.
	Outcome RevisionOutcome `json:"outcome,omitempty"`
	// Reason says in one line why the rollout ended so, such as the
	// devices that failed a revision the hub rolled back from.
	Reason string `json:"reason,omitempty"`
}

// DeploymentRevisionList is the answer of GET
// /v1/deployments/{name}/revisions: newest first.
type DeploymentRevisionList struct {
	TypeMeta `json:",inline"`
	// Items are the revisions, the newest first.
	Items []DeploymentRevision `json:"items"`
}

// RollbackRequest is the body of POST /v1/deployments/{name}/rollback.
type RollbackRequest struct {
	// ToRevision is the revision to go back to; 0 (or unset) is the
	// newest revision before the current one whose outcome is neither
	// Failed nor RolledBack.
	ToRevision int64 `json:"toRevision,omitempty"`
}

// HistoryLimit is how many revisions the deployment keeps:
// spec.revisionHistoryLimit, or DefaultRevisionHistoryLimit when unset.
func (s *DeploymentSpec) HistoryLimit() int {
	if s.RevisionHistoryLimit == nil {
		return DefaultRevisionHistoryLimit
	}
	return int(*s.RevisionHistoryLimit)
}

// ChangeCause returns the change cause a deployment's annotations give
// (kubernetes.io/change-cause, else fleet/change-cause), or "".
func ChangeCause(annotations map[string]string) string {
	if c := annotations[AnnotationChangeCause]; c != "" {
		return c
	}
	return annotations[AnnotationFleetChangeCause]
}

// TemplateHash is the hash of what a pod template makes devices run: its
// spec and its annotations (so fleet/restartedAt restarts the pod). A
// template without annotations hashes as PodSpecHash of its spec, so
// adding annotations to the hash changed no existing pod's hash.
func TemplateHash(t PodTemplate) string {
	var ann map[string]string
	if t.Metadata != nil {
		ann = t.Metadata.Annotations
	}
	return hashPod(t.Spec, ann)
}

// PodHash is the hash of a pod in a DesiredState: TemplateHash of the
// template it comes from. The hub sets Pod.Hash to it and agents
// recompute it.
func PodHash(p Pod) string {
	return hashPod(p.Spec, p.Annotations)
}

func hashPod(spec PodSpec, annotations map[string]string) string {
	if len(annotations) == 0 {
		return PodSpecHash(spec)
	}
	spec.Containers = slices.Clone(spec.Containers)
	spec.InitContainers = slices.Clone(spec.InitContainers)
	DefaultPodSpec(&spec)
	b, err := json.Marshal(struct {
		Spec        PodSpec           `json:"spec"`
		Annotations map[string]string `json:"annotations"`
	}{spec, annotations})
	if err != nil {
		// Strings, bools and slices: Marshal cannot fail.
		panic("schema: marshal pod: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// SameTemplate reports whether two pod templates are the same: the same
// spec (defaults filled in), labels and annotations.
func SameTemplate(a, b PodTemplate) bool {
	var la, lb, aa, ab map[string]string
	if a.Metadata != nil {
		la, aa = a.Metadata.Labels, a.Metadata.Annotations
	}
	if b.Metadata != nil {
		lb, ab = b.Metadata.Labels, b.Metadata.Annotations
	}
	return maps.Equal(la, lb) && maps.Equal(aa, ab) && PodSpecHash(a.Spec) == PodSpecHash(b.Spec)
}

// RollbackResponse is the answer of POST /v1/deployments/{name}/rollback.
type RollbackResponse struct {
	// Deployment is the deployment as stored after the rollback; its
	// status.revision is the number the template has now.
	Deployment Deployment `json:"deployment"`
	// FromRevision is the revision the deployment was rolled back from.
	FromRevision int64 `json:"fromRevision"`
	// ToRevision is the revision whose template the deployment has now, by
	// the number it had before the rollback.
	ToRevision int64 `json:"toRevision"`
	// Unchanged is true when the deployment already had that template:
	// nothing was written.
	Unchanged bool `json:"unchanged,omitempty"`
	// DryRun is true when nothing was stored (?dryRun=server).
	DryRun bool `json:"dryRun,omitempty"`
}
