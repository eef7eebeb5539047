package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// onlySigner hides a ReusableSigner's identity: every publish is signed,
// as before signatures were kept.
type onlySigner struct{ s DesiredSigner }

func (o onlySigner) SignDesiredState(canonical []byte) ([]byte, error) {
	return o.s.SignDesiredState(canonical)
}

// BenchmarkRestartRepublish10k is a restarted hub's controller over
// 10,000 stored desired states: load, then the first pass that publishes
// every one signed, with the signatures kept by the previous run
// (reused) and without (signed=every). The wall time is what a
// reconnecting fleet waits for before /healthz answers (issue 45).
//
//	go test -run XXX -bench RestartRepublish10k -benchtime 5x ./hub/controller/
func BenchmarkRestartRepublish10k(b *testing.B) {
	st := openStoreB(b)
	const devices = 10000
	for start := 0; start < devices; start += 1000 {
		objs := make([]schema.Object, 0, 1000)
		for i := start; i < start+1000; i++ {
			objs = append(objs, dev(fmt.Sprintf("d%05d", i), "fleet", "big"))
		}
		if _, err := st.ApplyAll(b.Context(), objs, false); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := st.ApplyAll(b.Context(), []schema.Object{depl("agent", "agent:1", "fleet", "big")}, false); err != nil {
		b.Fatal(err)
	}
	signer := &countingSigner{key: benchKey(b)}
	run := func(b *testing.B, s DesiredSigner) time.Duration {
		c, err := New(Options{Store: st, Conn: newRecorder(), Signer: s})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- c.Run(ctx) }()
		<-c.Ready()
		took := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return took
	}
	run(b, signer) // stores the states and keeps their signatures
	for _, mode := range []struct {
		name string
		s    DesiredSigner
	}{{"signed=kept", signer}, {"signed=every", onlySigner{signer}}} {
		b.Run(mode.name, func(b *testing.B) {
			signer.signs.Store(0)
			var total time.Duration
			for range b.N {
				total += run(b, mode.s)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/restart")
			b.ReportMetric(float64(signer.signs.Load())/float64(b.N), "signs/restart")
		})
	}
}

func benchKey(b *testing.B) ed25519.PrivateKey {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	return key
}
