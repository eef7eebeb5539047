package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// discardConn is a Conn that publishes nowhere.
type discardConn struct{}

func (discardConn) Publish(context.Context, string, []byte, bool) error { return nil }
func (discardConn) Subscribe(context.Context, string, func(string, []byte)) error {
	return nil
}

const (
	fuzzOp1 = "0123456789abcdef0123456789abcdef"
	fuzzOp2 = "fedcba9876543210fedcba9876543210"
)

// FuzzManagerHandle: whatever devices publish on responses topics, in any
// order, Handle never blocks or panics, and an open operation keeps only
// valid responses of its own ID from its own device, in increasing Seq
// order, nothing after Done, and no more than its window of unacknowledged
// data: a device can neither feed another device's operation nor make the
// hub hold more than the window.
func FuzzManagerHandle(f *testing.F) {
	resp := func(id, device string, seq int, extra string) string {
		return fmt.Sprintf(`{"apiVersion":"fleet/v1","kind":"Response","id":%q,"device":%q,"seq":%d%s}`, id, device, seq, extra)
	}
	f.Add([]byte{0, 0, 1},
		[]byte(resp(fuzzOp1, "pi-1", 1, `,"stream":"log","data":"aGk="`)+"\n"+
			resp(fuzzOp1, "pi-1", 2, `,"stream":"log","data":"aGk="`)+"\n"+
			resp(fuzzOp2, "pi-2", 1, `,"done":true,"exitCode":0`)))
	f.Add([]byte{1, 0, 3}, []byte(resp(fuzzOp1, "pi-2", 1, `,"data":"aGk="`)+"\n"+resp(fuzzOp1, "pi-1", 1, "")+"\n"+resp(fuzzOp1, "pi-1", 1, `,"done":true`)))
	f.Add([]byte{0, 0, 0, 0, 0, 0}, bytes.Repeat([]byte(resp(fuzzOp1, "pi-1", 7, `,"data":"aGk="`)+"\n"), 6))
	f.Add([]byte{0, 2, 4}, []byte(resp(fuzzOp1, "pi-1", 1, `,"top":{"device":"pi-1","time":"2024-01-01T00:00:00Z"},"done":true`)+"\n{}\nnull"))
	f.Fuzz(func(t *testing.T, topics, payloads []byte) {
		m, err := New(Options{Conn: discardConn{}, Model: fleetmodel.New(fleetmodel.Options{}), Signer: keySigner{testKey}})
		if err != nil {
			t.Fatal(err)
		}
		ops := []*op{newOp(fuzzOp1, "pi-1", schema.OpLogs, 4, true), newOp(fuzzOp2, "pi-2", schema.OpExec, 2, true)}
		for _, o := range ops {
			m.ops[o.id] = o
		}
		names := []string{
			m.opts.Topics.Device("pi-1", schema.TopicResponses),
			m.opts.Topics.Device("pi-2", schema.TopicResponses),
			m.opts.Topics.Device("pi-3", schema.TopicResponses),
			m.opts.Topics.Device("pi-1", schema.TopicStatus),
			"fleet/v1/devices/pi-1/responses/x",
		}
		for i, p := range bytes.Split(payloads, []byte("\n")) {
			topic := names[0]
			if i < len(topics) {
				topic = names[int(topics[i])%len(names)]
			}
			m.Handle(topic, p)
		}
		for _, o := range ops {
			o.mu.Lock()
			var last int64
			data := 0
			for i, r := range o.queue {
				if r.ID != o.id || r.Device != o.device {
					t.Fatalf("op %s of %s holds a response %s of %s", o.id, o.device, r.ID, r.Device)
				}
				if _, err := schema.DecodeResponse(mustMarshal(t, r)); err != nil {
					t.Fatalf("op holds an invalid response: %v", err)
				}
				if r.Seq <= last {
					t.Fatalf("op holds Seq %d after %d", r.Seq, last)
				}
				if r.Done && i != len(o.queue)-1 {
					t.Fatalf("op holds a response after Done")
				}
				if len(r.Data) > 0 {
					data++
				}
				last = r.Seq
			}
			if data > o.window || len(o.dataSeqs) > o.window {
				t.Fatalf("op of window %d holds %d data responses (%d counted)", o.window, data, len(o.dataSeqs))
			}
			if len(o.queue) > 2*o.window+2 {
				t.Fatalf("op of window %d holds %d responses", o.window, len(o.queue))
			}
			o.mu.Unlock()
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testKey signs the requests of tests without a fixture.
var testKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
