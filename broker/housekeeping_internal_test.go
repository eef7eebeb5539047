package broker

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// A mochi upgrade that moves its tickers must fail here, not silently
// bring the once-a-second sweeps back.
func TestSlowHousekeepingFindsMochisTickers(t *testing.T) {
	s := mqtt.New(&mqtt.Options{InlineClient: true})
	defer s.Close()
	if !slowHousekeeping(s) {
		t.Fatal("mochi's retainedExpiry/inflightExpiry tickers not found: check the mochi version")
	}
}
