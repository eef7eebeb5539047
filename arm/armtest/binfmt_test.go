package armtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnsureBinfmtAarch64 registers qemu-aarch64 with binfmt_misc (it stays
// registered: the host then runs arm64 binaries, and containerd arm64
// containers, directly) and proves it by executing the arm64 agent without
// naming qemu.
func TestEnsureBinfmtAarch64(t *testing.T) {
	lookTool(t, "qemu-aarch64-static")
	if os.Geteuid() != 0 {
		t.Fatal("registering binfmt_misc handlers needs root")
	}
	if err := EnsureBinfmt("qemu-aarch64"); err != nil {
		t.Fatal(err)
	}
	// A second call finds it registered.
	if err := EnsureBinfmt("qemu-aarch64"); err != nil {
		t.Fatalf("second EnsureBinfmt: %v", err)
	}
	entry, err := os.ReadFile(filepath.Join(BinfmtDir, "qemu-aarch64"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(entry), "enabled\n") || !strings.Contains(string(entry), "interpreter ") {
		t.Errorf("%s/qemu-aarch64:\n%s", BinfmtDir, entry)
	}
	t.Logf("%s/qemu-aarch64:\n%s", BinfmtDir, entry)

	bin := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("exec %s directly: %v\n%s", bin, err, out)
	}
	if !strings.Contains(string(out), "linux/arm64") {
		t.Errorf("arm64 agent says %q, want linux/arm64", out)
	}
	t.Logf("%s", out)
}

func TestEnsureBinfmtRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "register", "status", "../x", "a:b"} {
		if err := EnsureBinfmt(name); err == nil {
			t.Errorf("EnsureBinfmt(%q) = nil, want an error", name)
		}
	}
	if err := EnsureBinfmt("qemu-no-such-arch"); err == nil || !strings.Contains(err.Error(), "apt-get install -y qemu-user-static") {
		t.Errorf("EnsureBinfmt of an unknown handler: %v", err)
	}
}
