package status

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
)

var zoneName = sync.OnceValue(func() string {
	if tz := strings.TrimPrefix(os.Getenv("TZ"), ":"); tz != "" {
		return tz
	}
	if target, err := filepath.EvalSymlinks("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(target, "/zoneinfo/"); ok && name != "" {
			return name
		}
	}
	if b, err := os.ReadFile("/etc/timezone"); err == nil {
		if name := strings.TrimSpace(string(b)); name != "" {
			return name
		}
	}
	return "Local"
})

// ZoneName is the device's local time zone as the agent reads it, the
// one update windows with timeZone device use (Go's time.Local): the TZ
// variable, else the zone /etc/localtime links to, else /etc/timezone,
// else "Local". It is read once.
func ZoneName() string { return zoneName() }
