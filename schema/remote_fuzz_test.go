package schema

import (
	"bytes"
	"encoding/json"
	"testing"
)

const fuzzRequestID = "0123456789abcdef0123456789abcdef"

// FuzzDecodeRequest: what a device accepts from its requests topic is a
// request it can act on (a known op with its options, a valid ID and
// device name, bounded data and window), and it re-encodes to a payload
// that decodes to the same request.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"top"}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"logs","window":8,"deadline":"2024-01-01T00:00:00Z","logs":{"pod":"web","container":"c","tailLines":10,"follow":true,"sinceSeconds":5,"limitBytes":100}}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"exec","exec":{"pod":"web","command":["sh","-c","echo hi"],"tty":true,"stdin":true,"size":{"cols":80,"rows":24}}}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"stdin","data":"aGVsbG8=","eof":true,"seq":3}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"resize","size":{"cols":1,"rows":2}}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"ack","ack":7}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"cancel","future":true}`,
		`{"apiVersion":"fleet/v1","kind":"Request","id":"` + fuzzRequestID + `","device":"pi","op":"exec","exec":{"pod":"web","command":[""]}}`,
		`{"kind":"Request"}`, `null`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := DecodeRequest(payload)
		if err != nil {
			if r != nil {
				t.Fatalf("DecodeRequest returned a request with error %v", err)
			}
			return
		}
		if ValidateRequestIDHex(r.ID) != nil || ValidateName(r.Device) != nil {
			t.Fatalf("accepted request %q for device %q", r.ID, r.Device)
		}
		if len(r.Data) > MaxChunkBytes || r.Window < 0 || r.Window > MaxRequestWindow || r.Seq < 0 || r.Ack < 0 {
			t.Fatalf("accepted out-of-bounds request: data %d window %d seq %d ack %d", len(r.Data), r.Window, r.Seq, r.Ack)
		}
		switch {
		case r.Op == OpLogs && r.Logs == nil, r.Op == OpExec && (r.Exec == nil || len(r.Exec.Command) == 0 || r.Exec.Command[0] == ""), r.Op == OpResize && r.Size == nil:
			t.Fatalf("accepted op %s without its options", r.Op)
		}
		roundTrip(t, r, DecodeRequest)
	})
}

// FuzzDecodeResponse: what the hub accepts from a device's responses
// topic has a valid ID, device, sequence number, stream and bounded
// data, and re-encodes to a payload that decodes to the same response.
func FuzzDecodeResponse(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"fleet/v1","kind":"Response","id":"` + fuzzRequestID + `","device":"pi","seq":1,"stream":"stdout","data":"aGk="}`,
		`{"apiVersion":"fleet/v1","kind":"Response","id":"` + fuzzRequestID + `","device":"pi","seq":2,"done":true,"exitCode":3}`,
		`{"apiVersion":"fleet/v1","kind":"Response","id":"` + fuzzRequestID + `","device":"pi","seq":9,"done":true,"code":"NotFound","error":"no pod"}`,
		`{"apiVersion":"fleet/v1","kind":"Response","id":"` + fuzzRequestID + `","device":"pi","seq":1,"done":true,"top":{"device":"pi","time":"2024-01-01T00:00:00.5+02:00","node":{"cpuMillicores":5},"containers":[{"pod":"web","container":"c","memoryBytes":1}]}}`,
		`{"apiVersion":"fleet/v1","kind":"Response","id":"` + fuzzRequestID + `","device":"pi","seq":0}`,
		`{"apiVersion":"fleet/v1","kind":"Response","id":"` + fuzzRequestID + `","device":"pi","seq":1,"stream":"video"}`,
		`{}`, `null`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := DecodeResponse(payload)
		if err != nil {
			if r != nil {
				t.Fatalf("DecodeResponse returned a response with error %v", err)
			}
			return
		}
		if ValidateRequestIDHex(r.ID) != nil || ValidateName(r.Device) != nil || r.Seq < 1 || len(r.Data) > MaxChunkBytes {
			t.Fatalf("accepted response %q for device %q, seq %d, %d bytes", r.ID, r.Device, r.Seq, len(r.Data))
		}
		switch r.Stream {
		case "", StreamStdout, StreamStderr, StreamLog:
		default:
			t.Fatalf("accepted stream %q", r.Stream)
		}
		roundTrip(t, r, DecodeResponse)
	})
}

// roundTrip checks that v re-encodes to a payload that decode accepts and
// that encodes to the very same bytes again.
func roundTrip[T any](t *testing.T, v *T, decode func([]byte) (*T, error)) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode the decoded %T: %v", v, err)
	}
	back, err := decode(b)
	if err != nil {
		t.Fatalf("the re-encoded %T does not decode: %v\n%s", v, err, b)
	}
	b2, err := json.Marshal(back)
	if err != nil {
		t.Fatalf("encode %T again: %v", v, err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip changed the %T:\n%s\n%s", v, b, b2)
	}
}
