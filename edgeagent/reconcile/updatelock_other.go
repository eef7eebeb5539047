//go:build !linux

package reconcile

// lockHolder: update locks need flock and /proc/locks (Linux).
func lockHolder(string) (string, bool) { return "", false }
