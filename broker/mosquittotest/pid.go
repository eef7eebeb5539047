package mosquittotest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// PID is the process ID of the running mosquitto.
func (m *Mosquitto) PID() int { return m.cmd.Process.Pid }

// WritePIDFile writes the running mosquitto's process ID into a new file,
// as Mosquitto's pid_file option would, and returns its path.
func (m *Mosquitto) WritePIDFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mosquitto.pid")
	if err := os.WriteFile(p, []byte(strconv.Itoa(m.PID())+"\n"), 0o644); err != nil {
		t.Fatalf("mosquittotest: %v", err)
	}
	return p
}
