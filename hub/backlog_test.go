package hub

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestWarnListenBacklog(t *testing.T) {
	for _, c := range []struct {
		name    string
		devices int
		backlog func() (int, error)
		warn    bool
	}{
		{"fleet larger than the queue", 10000, func() (int, error) { return 4096, nil }, true},
		{"fleet fits", 4096, func() (int, error) { return 4096, nil }, false},
		{"no devices yet", 0, func() (int, error) { return 128, nil }, false},
		{"limit unreadable", 10000, func() (int, error) { return 0, errors.New("no /proc") }, false},
	} {
		var buf bytes.Buffer
		warnListenBacklog(slog.New(slog.NewTextHandler(&buf, nil)), c.devices, c.backlog)
		out := buf.String()
		if got := strings.Contains(out, "level=WARN"); got != c.warn {
			t.Errorf("%s: warned %v, want %v; log: %q", c.name, got, c.warn, out)
		}
		if c.warn && (!strings.Contains(out, "somaxconn=4096") || !strings.Contains(out, "devices=10000") || !strings.Contains(out, "net.core.somaxconn")) {
			t.Errorf("%s: the warning does not give the limit, the fleet and the setting: %q", c.name, out)
		}
	}
}
