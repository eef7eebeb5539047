package ingest

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkHandleStatus is the hot path of the status ingest: one status
// message of one of 1,000 devices, alternating between a heartbeat (the
// same report again, a new time) and a changed report.
//
//	go test -run XXX -bench HandleStatus -benchtime 20000x ./hub/ingest/
func BenchmarkHandleStatus(b *testing.B) {
	const devices = 1000
	names := make([]string, devices)
	for i := range names {
		names[i] = fmt.Sprintf("d%04d", i)
	}
	f := newFixture(b, names...)
	f.in.opts.FlushBatch = 1 << 30 // no flush wakes during the run
	payloads := make([][]byte, 2*devices)
	topics := make([]string, devices)
	for i, n := range names {
		topics[i] = topicPrefix + n + "/status"
		payloads[2*i] = []byte(statusJSON(n, 1, "arm64"))
		payloads[2*i+1] = []byte(statusJSON(n, 2, "arm64"))
		f.in.Handle(topicPrefix+n+"/online", []byte("online"))
	}
	b.ResetTimer()
	for i := range b.N {
		d := i % devices
		f.in.Handle(topics[d], payloads[2*d+(i/devices)%2])
		if i%devices == devices-1 {
			f.clock.add(time.Second)
		}
	}
}
