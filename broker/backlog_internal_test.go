package broker

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestReadBacklog(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if n, err := readBacklog(write("ok", "4096\n")); err != nil || n != 4096 {
		t.Errorf("readBacklog(4096) = %d, %v", n, err)
	}
	for name, content := range map[string]string{"empty": "", "garbage": "lots\n", "zero": "0\n", "negative": "-1\n"} {
		if n, err := readBacklog(write(name, content)); err == nil || !strings.Contains(err.Error(), "listen backlog") {
			t.Errorf("%s: readBacklog = %d, %v; want an error naming the backlog", name, n, err)
		}
	}
	if _, err := readBacklog(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
	if runtime.GOOS == "linux" {
		if n, err := ListenBacklog(); err != nil || n <= 0 {
			t.Errorf("ListenBacklog() = %d, %v on Linux", n, err)
		}
	}
}
