package store

import (
	"fmt"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Key prefixes of layout version 1 (see the package doc).
const (
	keyRevision = "v1/meta/revision"
	keyStoreID  = "v1/meta/store-id"
	// keyCommitID: the random ID of the last etcd commit (engine_etcd.go).
	keyCommitID       = "v1/meta/commit-id"
	prefixMeta        = "v1/meta/"
	prefixObjects     = "v1/objects/"
	prefixDesired     = "v1/desired/"
	prefixDesiredGen  = "v1/desired-generation/"
	prefixStatus      = "v1/status/"
	prefixTokens      = "v1/tokens/"
	prefixCredentials = "v1/credentials/"
	prefixRollouts    = "v1/rollouts/"
	prefixDeviceKeys  = "v1/device-keys/"
	prefixCrashes     = "v1/crash-reports/"
	prefixAgentPlans  = "v1/agent-rollouts/"
)

// AgentRolloutKey is where the controller keeps the planner's state of an
// AgentRollout (hub/agentplan.State: its waves and which device was given
// which version when), so a restarted hub resumes it where it was.
func AgentRolloutKey(name string) string { return prefixAgentPlans + name }

// AgentRolloutPrefix is the prefix of every AgentRolloutKey.
const AgentRolloutPrefix = prefixAgentPlans

// CrashReportsKey holds a device's latest crash reports (a JSON array of
// schema.CrashReport, written by the status ingest). Deleted with the
// device.
func CrashReportsKey(device string) string { return prefixCrashes + device }

// CrashReportsPrefix is the prefix of every CrashReportsKey.
const CrashReportsPrefix = prefixCrashes

// DeviceKeyKey holds the public key a device sent when it enrolled
// (schema.EnrollRequest.PublicKey): the key the hub seals Secrets to
// until the device reports one in its status. Deleted with the device.
func DeviceKeyKey(device string) string { return prefixDeviceKeys + device }

// DeviceKeyPrefix is the prefix of every DeviceKeyKey.
const DeviceKeyPrefix = prefixDeviceKeys

// RolloutKey is where the controller keeps the state of a Staged
// deployment's rollout, so a restarted hub resumes it where it was.
func RolloutKey(deployment string) string { return prefixRollouts + deployment }

// RolloutPrefix is the prefix of every RolloutKey.
const RolloutPrefix = prefixRollouts

// DesiredKey is where the controller keeps a device's DesiredState.
func DesiredKey(device string) string { return prefixDesired + device }

// DesiredPrefix is the prefix of every DesiredKey.
const DesiredPrefix = prefixDesired

// DesiredGenerationKey keeps the last generation issued to a deleted
// device, so that a device re-created under the same name continues from
// it: agents ignore a generation lower than one they applied.
func DesiredGenerationKey(device string) string { return prefixDesiredGen + device }

// DesiredGenerationPrefix is the prefix of every DesiredGenerationKey.
const DesiredGenerationPrefix = prefixDesiredGen

// StatusPrefix is the prefix of every StatusKey.
const StatusPrefix = prefixStatus

// StatusKey is where the status ingest keeps a device's last DeviceStatus.
func StatusKey(device string) string { return prefixStatus + device }

// TokenKey holds the hash of a device's token.
func TokenKey(device string) string { return prefixTokens + device }

// CredentialKey holds the hash and role of an operator credential.
func CredentialKey(name string) string { return prefixCredentials + name }

// ObjectKey is where an object of kind (schema.KindDevice…) is stored. It
// returns "" for an unknown kind.
func ObjectKey(kind, name string) string {
	res, ok := ResourceForKind(kind)
	if !ok {
		return ""
	}
	return prefixObjects + res + "/" + name
}

// objectPrefix is the prefix of every object of the resource.
func objectPrefix(resource string) string { return prefixObjects + resource + "/" }

// The stored kinds and their resources are schema's table of kinds
// (schema.StoredKinds): an object of each is kept under
// v1/objects/{resource}/{name}.

// ResourceForKind maps "Device" to "devices".
func ResourceForKind(kind string) (string, bool) {
	k, ok := schema.LookupKind(kind)
	if !ok || !k.Stored() {
		return "", false
	}
	return k.Resource, true
}

// KindForResource maps "devices" to "Device".
func KindForResource(resource string) (string, bool) {
	k, ok := schema.KindOfResource(resource)
	return k.Kind, ok
}

// Resources returns the resource names of the stored kinds, in the order
// the API lists them ("devices", "deployments", "configmaps", "secrets").
func Resources() []string {
	var out []string
	for _, k := range schema.StoredKinds() {
		out = append(out, k.Resource)
	}
	return out
}

// ListKindFor maps "Device" to "DeviceList".
func ListKindFor(kind string) string {
	k, _ := schema.LookupKind(kind)
	return k.ListKind
}

// checkWritableKey refuses keys outside the v1 layout and the store's own
// bookkeeping keys.
func checkWritableKey(key string) error {
	switch {
	case !strings.HasPrefix(key, "v1/"):
		return fmt.Errorf("key %q is outside the v1/ layout", key)
	case strings.HasPrefix(key, prefixMeta):
		return fmt.Errorf("key %q is reserved for the store", key)
	case strings.HasPrefix(key, prefixObjects):
		return fmt.Errorf("key %q holds an object: use the object methods so watchers see the change", key)
	}
	return nil
}
