package remote

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// FuzzHandleRequest: whatever arrives on the requests topic, Handle (the
// device's verification and dispatch entry point) never panics, and the
// runtime is touched (List, ExecStream, Stats, DiskSpace: anything a
// request can make the device do) only for a payload whose canonical
// bytes are exactly those of a request the hub signed: nothing unsigned
// or mutated runs. Handling the same payload twice runs it at most once.
// The seeds are genuine requests (exec, logs, top, and follow-ups), the
// same for another device, unsigned, and signed by another key.
func FuzzHandleRequest(f *testing.F) {
	// Deterministic seeds (a fixed clock and nonces; ed25519 signing is
	// deterministic): the fuzzing workers, each running this setup, agree
	// on what the hub signed.
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	genuine := map[string]bool{} // canonical bytes the hub signed
	id := "0123456789abcdef0123456789abcdef"
	for i, r := range []schema.Request{
		execReq(id, "/tmp/fuzz"),
		{ID: id, Op: schema.OpLogs, Logs: &schema.LogOptions{Pod: "web"}},
		{ID: id, Op: schema.OpTop},
		{ID: id, Op: schema.OpStdin, Data: []byte("hi"), Seq: 1},
		{ID: id, Op: schema.OpCancel},
		{ID: id, Op: schema.OpExec, Device: "pi-2", Exec: &schema.ExecOptions{Pod: "web", Command: []string{"id"}}},
	} {
		r.RequestAuth = schema.RequestAuth{Nonce: fmt.Sprintf("%032x", i+1), Expires: clock.Add(schema.RequestExpiry)}
		c := canonicalOf(f, r)
		genuine[string(c)] = true
		f.Add(resign(f, c, hubKey))
	}
	unsigned := canonicalOf(f, execReq(id, "/tmp/unsigned"))
	f.Add(unsigned)
	f.Add(resign(f, unsigned, otherKey))
	f.Add([]byte(`{"apiVersion":"fleet/v1","kind":"Request","id":"` + id + `","device":"pi-1","op":"top","signature":{"alg":"ed25519","keyId":"","sig":""}}`))

	f.Fuzz(func(t *testing.T, payload []byte) {
		rt := runtime.NewFake(runtime.FakeOptions{})
		rt.SetExecStreamHandler(func(context.Context, string, runtime.ExecStreamOptions) (int, error) { return 0, nil })
		rec := &recorder{Runtime: rt}
		pub := &countingPub{}
		srv, err := New(Options{
			Device: "pi-1", Publisher: pub, Runtime: rec, Key: hubPub,
			Node:          func(context.Context) schema.NodeMetrics { return schema.NodeMetrics{} },
			IndexInterval: -1, Lease: time.Second, PublishTimeout: time.Second,
			Now: func() time.Time { return clock },
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = srv.Run(ctx); close(done) }()
		for srv.stopping() {
			time.Sleep(50 * time.Microsecond) // polling; Run starts at once
		}
		srv.Handle(payload)
		srv.Handle(payload)
		cancel()
		<-done // Run returns once every operation ended

		calls := rec.recorded()
		c, _, err := schema.SplitSignedRequest(payload)
		authentic := err == nil && genuine[string(c)]
		if !authentic && (len(calls) > 0 || srv.Stats().Started > 0) {
			t.Fatalf("a payload the hub did not sign touched the runtime: %q (stats %+v)\n%q", calls, srv.Stats(), payload)
		}
		execs := 0
		for _, call := range calls {
			if strings.HasPrefix(call, "ExecStream") {
				execs++
			}
		}
		if st := srv.Stats(); st.Started > 1 || execs > 1 {
			t.Fatalf("the same payload ran %d times (%d execs)", st.Started, execs)
		}
	})
}

// countingPub is a Publisher that drops what it gets.
type countingPub struct{}

func (*countingPub) Publish(context.Context, string, bool, []byte) error { return nil }

// BenchmarkVerifyRequest: what verifying costs a device per request (a
// stdin chunk of 1 KiB, and an exec), replay check included.
func BenchmarkVerifyRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		r    schema.Request
	}{
		{"exec", execReq(newID(), "/tmp/bench")},
		{"stdin-1KiB", schema.Request{ID: newID(), Op: schema.OpStdin, Data: bytes.Repeat([]byte("x"), 1024), Seq: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			payloads := make([][]byte, b.N)
			for i := range payloads {
				payloads[i] = sign(b, c.r)
			}
			v := NewVerifier("pi-1", hubPub, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := Verify(v, schema.KindRequest, payloads[i], schema.DecodeRequest); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeUnsignedRequest: the decode alone, what a device did per
// request before requests were signed (the baseline of
// BenchmarkVerifyRequest).
func BenchmarkDecodeUnsignedRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		r    schema.Request
	}{
		{"exec", execReq(newID(), "/tmp/bench")},
		{"stdin-1KiB", schema.Request{ID: newID(), Op: schema.OpStdin, Data: bytes.Repeat([]byte("x"), 1024), Seq: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := canonicalOf(b, c.r)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := schema.DecodeRequest(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
