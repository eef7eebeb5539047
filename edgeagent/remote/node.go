package remote

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/status"
	"github.com/fleetmq/fleet/schema"
)

// ReadNode measures the device: load from /proc/loadavg, memory from
// /proc/meminfo, the file systems of stateDir and of the runtime's
// images, uptime from /proc/uptime, the SoC temperature from
// /sys/class/thermal/thermal_zone0/temp and, on a Raspberry Pi,
// `vcgencmd get_throttled`. A figure it cannot read is left out.
func ReadNode(ctx context.Context, stateDir string, rt runtime.Runtime) schema.NodeMetrics {
	var n schema.NodeMetrics
	n.CPUs = goruntime.NumCPU()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		n.Load1, n.Load5, n.Load15 = parseLoadavg(b)
	}
	// Memory and uptime as status reports them.
	ni := status.ReadNodeInfo("")
	n.MemoryTotalBytes, n.MemoryAvailableBytes, n.UptimeSeconds = ni.MemoryTotalBytes, ni.MemoryAvailBytes, ni.UptimeSeconds
	if stateDir != "" {
		if d, err := runtime.StatFS(stateDir); err == nil {
			n.StateDisk = &schema.DiskMetrics{Path: d.Path, TotalBytes: d.Total, FreeBytes: d.Free}
		}
	}
	if rt != nil {
		if d, err := rt.DiskSpace(ctx); err == nil {
			n.ImageDisk = &schema.DiskMetrics{Path: d.Path, TotalBytes: d.Total, FreeBytes: d.Free}
		}
	}
	n.TemperatureCelsius = ni.TemperatureCelsius
	if p, err := exec.LookPath("vcgencmd"); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := exec.CommandContext(cctx, p, "get_throttled").Output()
		cancel()
		if err == nil {
			n.Throttled, n.ThrottledFlags, _ = parseThrottled(string(out))
		}
	}
	return n
}

func parseLoadavg(b []byte) (l1, l5, l15 float64) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0, 0
	}
	l1, _ = strconv.ParseFloat(f[0], 64)
	l5, _ = strconv.ParseFloat(f[1], 64)
	l15, _ = strconv.ParseFloat(f[2], 64)
	return l1, l5, l15
}

// throttledBits names the bits of `vcgencmd get_throttled`: 0-3 now,
// 16-19 occurred since boot.
var throttledBits = []struct {
	bit  uint
	name string
}{
	{0, "under-voltage-now"}, {1, "arm-frequency-capped-now"}, {2, "throttled-now"}, {3, "soft-temp-limit-now"},
	{16, "under-voltage-occurred"}, {17, "arm-frequency-capped-occurred"}, {18, "throttled-occurred"}, {19, "soft-temp-limit-occurred"},
}

// parseThrottled decodes "throttled=0x50005".
func parseThrottled(out string) (string, []string, error) {
	_, v, ok := strings.Cut(strings.TrimSpace(out), "=")
	if !ok {
		return "", nil, fmt.Errorf("get_throttled: unexpected output %q", out)
	}
	x, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
	if err != nil {
		return "", nil, fmt.Errorf("get_throttled: %q: %w", v, err)
	}
	var flags []string
	for _, b := range throttledBits {
		if x&(1<<b.bit) != 0 {
			flags = append(flags, b.name)
		}
	}
	return v, flags, nil
}
