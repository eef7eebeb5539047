//go:build !linux

package status

import (
	"os"

	"github.com/fleetmq/fleet/schema"
)

// ReadNodeInfo returns the hostname; other facts are read on Linux only.
func ReadNodeInfo(dir string) *schema.NodeInfo {
	n := &schema.NodeInfo{}
	n.Hostname, _ = os.Hostname()
	return n
}
