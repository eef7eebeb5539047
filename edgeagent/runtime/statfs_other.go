//go:build !linux

package runtime

import (
	"errors"
	"fmt"
)

// StatFS measures the filesystem holding path; Linux only.
func StatFS(path string) (DiskSpace, error) {
	return DiskSpace{}, fmt.Errorf("statfs %s: %w", path, errors.ErrUnsupported)
}
