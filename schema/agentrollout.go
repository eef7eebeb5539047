package schema

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/reference"
)

// KindAgentRollout is the kind of an AgentRollout.
const KindAgentRollout = "AgentRollout"

// AgentSkewMinors is the version-skew policy: a hub serves agents of its
// own minor release and of up to this many minor releases older, within
// its major release. It refuses an AgentRollout to a version older than
// that, and to a version newer than itself.
const AgentSkewMinors = 2

// The architectures an AgentRollout names artifacts for, as Go names them
// (GOARCH, the device's fleet/arch label): arm covers armv7 and armv6.
var agentArches = []string{"amd64", "arm64", "arm"}

// AgentRollout says which release of fleet-agent runs on which devices,
// and how a new release reaches them: in the waves of the same Staged
// strategy Deployments use, with its failure threshold and automatic
// rollback. Each selected device's desired state names the version and
// the artifact of its architecture (desiredState.agent); an offline
// device stays pending, never failed.
type AgentRollout struct {
	TypeMeta `json:",inline"`
	// Metadata names the rollout. Required.
	Metadata ObjectMeta `json:"metadata"`
	// Spec says which version, where, and how. Required.
	Spec AgentRolloutSpec `json:"spec"`
	// Status follows the rollout: its waves and each device's phase.
	// Read-only: the hub fills it in and ignores it in manifests.
	Status *AgentRolloutStatus `json:"status,omitempty"`
}

func (a *AgentRollout) GetTypeMeta() *TypeMeta   { return &a.TypeMeta }
func (a *AgentRollout) GetMetadata() *ObjectMeta { return &a.Metadata }

// AgentRolloutSpec says which agent release runs where.
type AgentRolloutSpec struct {
	// Version is the agent release to run, as make release stamps it:
	// v1.4.0 (a leading v, major.minor.patch, optionally -prerelease).
	// Required. It may be at most AgentSkewMinors (2) minor releases older
	// than the hub, and no newer than the hub.
	Version string `json:"version"`
	// Image is a multi-arch OCI image that holds the agent binary at
	// /fleet-agent, such as registry.example.com/fleet/agent:v1.4.0; the
	// agent pulls it through containerd like any image (same registry,
	// pull secrets and mirrors). It may be left out when every artifact
	// names its own image.
	Image string `json:"image,omitempty"`
	// Artifacts name, per architecture, the SHA-256 of the agent binary
	// (and optionally an image of that architecture only); the agent
	// refuses a binary whose digest differs.
	Artifacts []AgentArtifact `json:"artifacts,omitempty"`
	// Selector picks the devices, by their labels. An empty selector
	// matches every device; one that matches no device is refused.
	Selector LabelSelector `json:"selector"`
	// Strategy governs how the new release reaches the devices: AllAtOnce
	// or Staged (steps, failureThreshold, autoRollback), as for a
	// Deployment. Defaults to AllAtOnce.
	Strategy Strategy `json:"strategy,omitempty"`
	// Paused stops the rollout: no new wave starts while it is true.
	Paused bool `json:"paused,omitempty"`
}

// AgentArtifact is the agent binary of one architecture.
type AgentArtifact struct {
	// Arch is the architecture, as Go names it: amd64, arm64 or arm
	// (armv7 and armv6). Required, each at most once.
	Arch string `json:"arch"`
	// Digest is the SHA-256 of the binary: sha256: and 64 lower-case hex
	// digits. Required.
	Digest string `json:"digest"`
	// Image is an image of this architecture that holds the binary at
	// /fleet-agent; defaults to spec.image.
	Image string `json:"image,omitempty"`
}

// AgentPhase is where one device stands in an AgentRollout.
type AgentPhase string

// The phases of a device in an AgentRollout.
const (
	// AgentPending: not given the version yet, or offline. An offline
	// device is pending, never failed.
	AgentPending AgentPhase = "Pending"
	// AgentUpdating: given the version, not reporting it healthy yet.
	AgentUpdating AgentPhase = "Updating"
	// AgentUpdated: reports the version, connected and healthy.
	AgentUpdated AgentPhase = "Updated"
	// AgentFailed: went back to its previous binary while online (the new
	// one crashed, did not connect or did not report in time).
	AgentFailed AgentPhase = "Failed"
	// AgentRolledBack: given the previous version again by a rollback.
	AgentRolledBack AgentPhase = "RolledBack"
)

// AgentRolloutStatus follows an AgentRollout.
type AgentRolloutStatus struct {
	// ObservedGeneration is the generation of the spec the status is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Rollout is where the waves stand, as for a Deployment's Staged
	// rollout; its hash is the version.
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// LastGoodVersion is the last version whose rollout completed, which
	// a rollback (autoRollback, fleet rollout undo) returns to.
	LastGoodVersion string `json:"lastGoodVersion,omitempty"`
	// LastGood is the spec of that version (its artifacts), which fleet
	// rollout undo agentrollout/NAME gives the rollout again.
	LastGood *AgentRolloutSpec `json:"lastGood,omitempty"`
	// Devices are the selected devices, sorted by name.
	Devices []AgentDeviceStatus `json:"devices,omitempty"`
}

// AgentDeviceStatus is one device's place in an AgentRollout.
type AgentDeviceStatus struct {
	// Name is the device's name.
	Name string `json:"name"`
	// Version is the agent version the device last reported.
	Version string `json:"version,omitempty"`
	// Desired is the version its desired state names.
	Desired string `json:"desired,omitempty"`
	// Phase is Pending, Updating, Updated, Failed or RolledBack.
	Phase AgentPhase `json:"phase"`
	// Online says whether the device is connected.
	Online bool `json:"online"`
	// Reason says why the device failed, in the agent's words.
	Reason string `json:"reason,omitempty"`
}

// DesiredAgent is the agent a device's desired state asks it to run
// (desiredState.agent): the version and the artifact of its
// architecture. An agent that does not know the field ignores it.
type DesiredAgent struct {
	// Version is the agent release to run.
	Version string `json:"version"`
	// Image holds the binary at /fleet-agent, pulled through containerd.
	Image string `json:"image,omitempty"`
	// Digest is the SHA-256 of the binary; the agent refuses a binary
	// whose digest differs.
	Digest string `json:"digest,omitempty"`
	// Rollout names the AgentRollout that asks for it.
	Rollout string `json:"rollout,omitempty"`
}

// AgentVersion is a parsed agent release: vMAJOR.MINOR.PATCH[-PRE].
type AgentVersion struct {
	Major, Minor, Patch int
	Pre                 string
}

var agentVersionRE = regexp.MustCompile(`^v(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})(?:-([0-9A-Za-z.-]{1,64}))?$`)

// ParseAgentVersion parses a release such as v1.4.0 or v1.5.0-rc.1.
func ParseAgentVersion(s string) (AgentVersion, error) {
	m := agentVersionRE.FindStringSubmatch(s)
	if m == nil {
		return AgentVersion{}, fmt.Errorf("%q: want a release such as v1.4.0 (v, major.minor.patch, optionally -prerelease)", truncate(s))
	}
	var v AgentVersion
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	v.Pre = m[4]
	return v, nil
}

// String formats v as vMAJOR.MINOR.PATCH[-PRE].
func (v AgentVersion) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	return s
}

// Compare orders releases: -1, 0 or 1. A prerelease comes before its
// release; prereleases compare as strings.
func (v AgentVersion) Compare(w AgentVersion) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		if d != 0 {
			return sign(d)
		}
	}
	switch {
	case v.Pre == w.Pre:
		return 0
	case v.Pre == "":
		return 1
	case w.Pre == "":
		return -1
	}
	return strings.Compare(v.Pre, w.Pre)
}

func sign(d int) int {
	if d < 0 {
		return -1
	}
	return 1
}

// CheckAgentSkew applies the version-skew policy: a hub of release hub
// serves agents of its own major release, no newer than itself and at most
// AgentSkewMinors minor releases older. A hub built without a release
// ("dev", or any version that does not parse) checks nothing. The error
// names spec.version.
func CheckAgentSkew(hub, agent string) error {
	h, err := ParseAgentVersion(hub)
	if err != nil {
		return nil
	}
	a, err := ParseAgentVersion(agent)
	if err != nil {
		return fmt.Errorf("spec.version: %w", err)
	}
	switch {
	case a.Major != h.Major:
		return fmt.Errorf("spec.version: %s is another major release than this hub (%s): a hub serves agents of its own major release only", a, h)
	case a.Compare(h) > 0:
		return fmt.Errorf("spec.version: unknown version %s: it is newer than this hub (%s); upgrade the hub first", a, h)
	case a.Minor < h.Minor-AgentSkewMinors:
		return fmt.Errorf("spec.version: %s is below the version-skew policy: this hub (%s) serves agents from v%d.%d.0 on (at most %d minor releases older)", a, h, h.Major, max(h.Minor-AgentSkewMinors, 0), AgentSkewMinors)
	}
	return nil
}

var sha256DigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ValidateAgentRollout checks an AgentRollout as sent by a user (after
// defaulting). The skew policy and the selector's devices need the hub:
// CheckAgentSkew and the API check those.
func ValidateAgentRollout(a *AgentRollout) error {
	var errs errList
	validateTypeMeta(a.TypeMeta, KindAgentRollout, &errs)
	validateMeta(&a.Metadata, &errs)
	if a.Spec.Version == "" {
		errs.add("spec.version", "required: the agent release to run, such as v1.4.0")
	} else if _, err := ParseAgentVersion(a.Spec.Version); err != nil {
		errs.add("spec.version", "%v", err)
	}
	if a.Spec.Image != "" {
		if err := validateImageRef(a.Spec.Image); err != nil {
			errs.add("spec.image", "%v", err)
		}
	}
	validateAgentArtifacts(a.Spec, &errs)
	validateSelector(a.Spec.Selector, "spec.selector", &errs)
	if t := a.Spec.Strategy.Type; t == StrategyRollingUpdate {
		errs.add("spec.strategy.type", "unsupported value %q for an AgentRollout: want %q or %q", t, StrategyAllAtOnce, StrategyStaged)
	} else {
		validateStrategy(a.Spec.Strategy, "spec.strategy", &errs)
	}
	return errs.err(KindAgentRollout, a.Metadata.Name)
}

func validateAgentArtifacts(s AgentRolloutSpec, errs *errList) {
	if s.Image == "" && len(s.Artifacts) == 0 {
		errs.add("spec", "set spec.image (a multi-arch image of the agent) or spec.artifacts (a digest per architecture), or both")
	}
	seen := map[string]bool{}
	for i, art := range s.Artifacts {
		f := fmt.Sprintf("spec.artifacts[%d]", i)
		switch {
		case art.Arch == "":
			errs.add(f+".arch", "required: one of %s", strings.Join(agentArches, ", "))
		case !slices.Contains(agentArches, art.Arch):
			errs.add(f+".arch", "unsupported value %q: want one of %s", truncate(art.Arch), strings.Join(agentArches, ", "))
		case seen[art.Arch]:
			errs.add(f+".arch", "%q is named twice", art.Arch)
		}
		seen[art.Arch] = true
		if !sha256DigestRE.MatchString(art.Digest) {
			errs.add(f+".digest", "%q: want sha256: and 64 lower-case hex digits (sha256sum of the binary)", truncate(art.Digest))
		}
		if art.Image != "" {
			if err := validateImageRef(art.Image); err != nil {
				errs.add(f+".image", "%v", err)
			}
		} else if s.Image == "" {
			errs.add(f+".image", "required when spec.image is not set: the image of this architecture that holds the binary")
		}
	}
}

// ArtifactFor returns what a device of arch must run, and false when the
// spec has nothing for arch.
func (s AgentRolloutSpec) ArtifactFor(arch string) (DesiredAgent, bool) {
	for _, art := range s.Artifacts {
		if art.Arch == arch {
			img := art.Image
			if img == "" {
				img = s.Image
			}
			return DesiredAgent{Version: s.Version, Image: img, Digest: art.Digest}, true
		}
	}
	if s.Image == "" {
		return DesiredAgent{}, false
	}
	return DesiredAgent{Version: s.Version, Image: s.Image}, true
}

func validateImageRef(ref string) error {
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fmt.Errorf("%q is not a valid image reference: %w", truncate(ref), err)
	}
	return nil
}
