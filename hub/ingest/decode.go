package ingest

import (
	"encoding/json"
	"fmt"
	"slices"

	fastjson "github.com/segmentio/encoding/json"

	"github.com/fleetmq/fleet/schema"
)

// decode decodes a device's JSON payload (a DeviceStatus or an Event) into
// v, which must point to a zero value.
//
// The status and events of every device change pass here, so it uses
// segmentio/encoding's decoder, tested to decode as encoding/json does and
// three to five times faster on these payloads (BenchmarkDecode). What it
// refuses, or panics on (the payload comes from a device), is decoded
// again by encoding/json, whose verdict and error are the ones that count:
// a payload is never refused that encoding/json accepts. A status payload
// is kept unchanged beside the decoded status (the stored report is these
// bytes), so the status's strings point into it rather than into copies;
// an event's are copied, so the events the model keeps do not hold their
// whole payloads.
func decode(payload []byte, v any) error {
	if !longDigitRun(payload) && fastDecode(payload, v) {
		if st, ok := v.(*schema.DeviceStatus); ok {
			fitSlices(st)
		}
		return nil
	}
	// A failed decode may have filled part of v: start again from zero.
	if err := zero(v); err != nil {
		return err
	}
	return json.Unmarshal(payload, v)
}

// longDigitRun reports whether b holds 20 digits in a row: a number that
// may not fit in a uint64, which segmentio/encoding v0.5.4 wraps around
// (its overflow check misses products that wrap past the previous value)
// where encoding/json refuses it. Such payloads go to encoding/json.
func longDigitRun(b []byte) bool {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			n = 0
			continue
		}
		if n++; n >= 20 {
			return true
		}
	}
	return false
}

// fastDecode reports whether segmentio's decoder decoded payload into v.
func fastDecode(payload []byte, v any) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	var flags fastjson.ParseFlags
	if _, ok := v.(*schema.DeviceStatus); ok {
		flags = fastjson.DontCopyString
	}
	rest, err := fastjson.Parse(payload, v, flags)
	return err == nil && len(rest) == 0
}

// fitSlices copies a decoded status's pods and containers into slices of
// their length: segmentio's decoder gives a slice room for 10 elements,
// and the model keeps every device's last status.
func fitSlices(st *schema.DeviceStatus) {
	if cap(st.Pods) > len(st.Pods) {
		st.Pods = slices.Clone(st.Pods)
	}
	for i := range st.Pods {
		if c := st.Pods[i].Containers; cap(c) > len(c) {
			st.Pods[i].Containers = slices.Clone(c)
		}
	}
}

// zero resets what v points to, for the types decode is used with.
func zero(v any) error {
	switch p := v.(type) {
	case *schema.DeviceStatus:
		*p = schema.DeviceStatus{}
	case *schema.Event:
		*p = schema.Event{}
	default:
		return fmt.Errorf("decode into %T: not a payload type", v)
	}
	return nil
}
