//go:build linux

package runtime

import (
	"fmt"
	"syscall"
)

// StatFS measures the filesystem holding path.
func StatFS(path string) (DiskSpace, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return DiskSpace{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize) // int64 or int32 depending on the arch
	return DiskSpace{Path: path, Total: st.Blocks * bs, Free: st.Bavail * bs}, nil
}
