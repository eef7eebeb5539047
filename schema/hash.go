package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// PodSpecHash returns a short stable hash of a (defaulted) pod spec. Agents
// label containers with it and replace a container whose hash differs.
func PodSpecHash(p PodSpec) string {
	p.Containers = slices.Clone(p.Containers)
	p.InitContainers = slices.Clone(p.InitContainers)
	DefaultPodSpec(&p)
	b, err := json.Marshal(p)
	if err != nil {
		// PodSpec has only strings, bools and slices: Marshal cannot fail.
		panic("schema: marshal PodSpec: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
