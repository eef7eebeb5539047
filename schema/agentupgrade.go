package schema

import "time"

// AgentUpgradePhase is where a device's agent stands in replacing itself
// with the release its desired state names (desiredState.agent).
type AgentUpgradePhase string

// The phases of an agent's own upgrade, as the device reports them in
// status.agent.upgrade.
const (
	// AgentUpgradeDownloading: the agent is getting the new binary (the
	// image's pull and the extraction of /fleet-agent).
	AgentUpgradeDownloading AgentUpgradePhase = "Downloading"
	// AgentUpgradeTrial: the new binary is staged and runs in a trial; the
	// previous one is kept until the new one reports healthy.
	AgentUpgradeTrial AgentUpgradePhase = "Trial"
	// AgentUpgradeUpdated: the new binary passed its trial and is the
	// device's agent now.
	AgentUpgradeUpdated AgentUpgradePhase = "Updated"
	// AgentUpgradeFailed: the new binary was refused (its digest is not
	// the signed one, it could not be fetched) or failed its trial (it
	// exited at start, did not connect or did not report within the
	// deadline), and the previous binary runs; Message says why. The agent
	// does not try the same version and digest again until the desired
	// state names another.
	AgentUpgradeFailed AgentUpgradePhase = "Failed"
)

// AgentUpgradeStatus is the device's report on its agent's own upgrade
// (status.agent.upgrade): absent when the desired state names no other
// agent than the one running.
type AgentUpgradeStatus struct {
	// Version is the release the upgrade is about: the one
	// desiredState.agent names.
	Version string `json:"version"`
	// Phase is Downloading, Trial, Updated or Failed.
	Phase AgentUpgradePhase `json:"phase"`
	// Message says why, for Failed, and what happens, otherwise.
	Message string `json:"message,omitempty"`
	// Previous is the release that ran before the switch: the one a
	// failed trial went back to.
	Previous string `json:"previous,omitempty"`
	// Time is when the phase began.
	Time time.Time `json:"time"`
}
