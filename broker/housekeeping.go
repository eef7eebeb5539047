package broker

import (
	"reflect"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// Intervals of mochi's sweeps once Fleet has slowed them down.
const (
	retainedSweepInterval = time.Minute
	inflightSweepInterval = 10 * time.Second
)

// slowHousekeeping makes two of mochi's once-a-second sweeps less
// frequent. Every second mochi copies its whole retained store into a new
// map to look for expired messages, and every client into another to look
// for expired in-flight messages: with 10,000 devices that is 30,000
// retained messages (desired, status, online) copied per second, about 7 %
// of the hub's CPU while a fleet converges, and garbage for the GC when it
// idles. Fleet's retained messages never expire
// (MaximumMessageExpiryInterval = 0); only an MQTT 5 publisher's own expiry
// can, and a minute's lateness is harmless there.
//
// mochi v2.7.9 has no option for these intervals, so the tickers are
// reached by reflection; it reports false, changing nothing, if mochi's
// layout is not the one expected (a test pins that).
func slowHousekeeping(s *mqtt.Server) bool {
	v := reflect.ValueOf(s).Elem().FieldByName("loop")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	loop := v.Elem()
	tickerType := reflect.TypeFor[*time.Ticker]()
	ticker := func(name string) *time.Ticker {
		f := loop.FieldByName(name)
		if !f.IsValid() || f.Type() != tickerType || f.IsNil() {
			return nil
		}
		return (*time.Ticker)(f.UnsafePointer())
	}
	retained, inflight := ticker("retainedExpiry"), ticker("inflightExpiry")
	if retained == nil || inflight == nil {
		return false
	}
	retained.Reset(retainedSweepInterval)
	inflight.Reset(inflightSweepInterval)
	return true
}
