//go:build !linux

package volumes

import (
	"errors"
	"io/fs"

	"github.com/fleetmq/fleet/schema"
)

// errNoMounts: volumes that need mounts run on Linux only.
var errNoMounts = errors.New("volumes: mounts need Linux")

// Kernel is the Mounter of the running kernel: none outside Linux.
type Kernel struct{}

// MountTmpfs implements Mounter.
func (Kernel) MountTmpfs(string, int64, fs.FileMode) error { return errNoMounts }

// Bind implements Mounter.
func (Kernel) Bind(string, string) error { return errNoMounts }

// Unmount implements Mounter.
func (Kernel) Unmount(string) error { return nil }

// MountsUnder implements Mounter.
func (Kernel) MountsUnder(string) ([]string, error) { return nil, nil }

func (m *Manager) subPath(_, _, _ string, _ *schema.Volume) (string, error) {
	return "", errNoMounts
}
