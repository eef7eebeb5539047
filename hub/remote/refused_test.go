package remote

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestDeviceRefusals: a device's refusal of the hub's own request
// (code Unauthenticated) is a 502 RequestRefused for logs and top, with
// a Warning RequestRefused event on the device; a refusal of a request
// the hub did not send is counted as forged_request_refused and is an
// event too.
func TestDeviceRefusals(t *testing.T) {
	f := newFixture(t, nil)
	dev := f.device("pi-1")
	refuse := func(op string) {
		dev.script(func() {
			req := dev.expect(op)
			dev.respond(req.ID, 1, failed(schema.CodeUnauthenticated, "device pi-1 refused request "+req.ID+": request refused: expired"))
		})
	}
	for _, path := range []string{"/v1/devices/pi-1/pods/web/log", "/v1/devices/pi-1/top"} {
		op := schema.OpLogs
		if strings.HasSuffix(path, "/top") {
			op = schema.OpTop
		}
		refuse(op)
		resp, body := f.get(path, adminToken)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"reason":"`+schema.ReasonRequestRefused+`"`) ||
			!strings.Contains(body, "request refused: expired") {
			t.Errorf("GET %s: %d %s, want 502 %s", path, resp.StatusCode, body, schema.ReasonRequestRefused)
		}
	}
	f.awaitNoOps()
	events := func(want string) int {
		n := 0
		for _, e := range f.model.Events("pi-1", "") {
			if e.Reason == EventRequestRefused && e.Type == schema.EventWarning && strings.Contains(e.Message, want) {
				n++
			}
		}
		return n
	}
	if n := events("refused the hub's"); n != 2 {
		t.Errorf("%d RequestRefused events of the hub's requests, want 2", n)
	}

	before := f.dropped(dropForgedRefused)
	dev.respond(newTestID(), 1, failed(schema.CodeUnauthenticated, "device pi-1 refused request: request refused: not signed"))
	eventually(t, "the forged request's refusal counted", func() bool { return f.dropped(dropForgedRefused) > before })
	if n := events("the hub did not send"); n != 1 {
		t.Errorf("%d RequestRefused events of forged requests, want 1", n)
	}
	dev.close()
}

func newTestID() string { return strings.Repeat("ab", schema.RequestIDBytes) }
