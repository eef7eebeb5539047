package status

import (
	"strconv"
	"strings"
)

// parseMillidegrees parses a thermal zone's temp file.
func parseMillidegrees(b []byte) *float64 {
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil
	}
	c := float64(v) / 1000
	return &c
}
