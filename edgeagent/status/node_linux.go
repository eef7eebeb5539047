//go:build linux

package status

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/fleetmq/fleet/schema"
)

// ReadNodeInfo reads the device's facts: hostname, memory from
// /proc/meminfo, disk of the filesystem holding dir, uptime from
// /proc/uptime, the SoC's temperature from the first thermal zone. Facts
// it cannot read are left zero.
func ReadNodeInfo(dir string) *schema.NodeInfo {
	n := &schema.NodeInfo{}
	n.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		n.MemoryTotalBytes, n.MemoryAvailBytes = parseMeminfo(b)
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		n.UptimeSeconds = parseUptime(b)
	}
	n.TemperatureCelsius = ReadTemperature()
	if dir != "" {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			bs := uint64(st.Bsize) // int64 or int32 depending on the arch
			n.DiskTotalBytes = st.Blocks * bs
			n.DiskFreeBytes = st.Bavail * bs
		}
	}
	return n
}

// ReadTemperature reads the SoC's temperature in °C from
// /sys/class/thermal/thermal_zone0/temp (millidegrees), nil where there
// is none.
func ReadTemperature() *float64 {
	b, err := os.ReadFile("/sys/class/thermal/thermal_zone0/temp")
	if err != nil {
		return nil
	}
	return parseMillidegrees(b)
}

func parseMeminfo(b []byte) (total, avail uint64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 2 && f[2] == "kB" {
			v *= 1024
		}
		switch f[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	return total, avail
}

func parseUptime(b []byte) int64 {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return int64(v)
}
