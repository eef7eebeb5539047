package ingest

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

// statusWithKey is statusJSON carrying a publicKey.
func statusWithKey(device string, gen int64, key string) string {
	s := statusJSON(device, gen, "arm64")
	return strings.Replace(s, `"time":`, fmt.Sprintf(`"publicKey":%q,"time":`, key), 1)
}

// newPublicKey is a random X25519-sized public key, base64.
func newPublicKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// BenchmarkHandleStatusWithKey is BenchmarkHandleStatus with every
// status carrying its device's public key, as agents send them: the
// difference between the two is the cost of the bound-key check per
// status (a map lookup and a string compare once every device's key is
// known; the first status of each device is bound before the timer).
//
//	go test -run XXX -bench 'HandleStatus' -benchtime 20000x ./hub/ingest/
func BenchmarkHandleStatusWithKey(b *testing.B) {
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
		key := newPublicKey(b)
		topics[i] = topicPrefix + n + "/status"
		payloads[2*i] = []byte(statusWithKey(n, 1, key))
		payloads[2*i+1] = []byte(statusWithKey(n, 2, key))
		f.in.Handle(topicPrefix+n+"/online", []byte("online"))
		f.in.Handle(topics[i], payloads[2*i])
	}
	f.clock.add(time.Second)
	b.ResetTimer()
	for i := range b.N {
		d := i % devices
		f.in.Handle(topics[d], payloads[2*d+(i/devices)%2])
		if i%devices == devices-1 {
			f.clock.add(time.Second)
		}
	}
}
