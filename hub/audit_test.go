package hub

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/schema"
)

// auditEntries is GET /v1/audit.
func (h *testHub) auditEntries(t *testing.T) []schema.AuditEntry {
	t.Helper()
	code, b := h.do(t, h.token, "GET", "/v1/audit", "")
	var l schema.AuditList
	if err := json.Unmarshal(b, &l); code != 200 || err != nil {
		t.Fatalf("GET /v1/audit: %d %s", code, b)
	}
	return l.Items
}

// TestHubAuditsMQTTLoginsAndEnrollments: refused MQTT logins are in the
// audit trail (username, address, "refused", then "throttled" once the
// address failed too often: aggregated, the first of each at once and the
// others counted, however many guesses), and so are enrollments: who (the bootstrap token's ID), which
// device, from where. No password or token is recorded.
func TestHubAuditsMQTTLoginsAndEnrollments(t *testing.T) {
	h := startHub(t, Options{})
	url := "tcp://" + h.Info().MQTTAddr
	// Enrolled first: the guesses below throttle this address, and a
	// bootstrap token never seen from it would wait.
	bt := createBootstrapToken(t, h, `{"labels":{"site":"north"}}`)
	bc := dialBootstrap(t, url, bt.Token, schema.RequestIDPrefix+"audit-request-0001")
	if resp := bc.send(requestJSON(bt.Token, "pi-audited")); resp.Token == "" {
		t.Fatalf("enroll: %+v", resp)
	}
	bc.c.Disconnect(0)

	const guesses = ratelimit.DefaultAuthBurst + 5
	for i := range guesses {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("guess").
			SetUsername("pi-guess").SetPassword("wrong-password").SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() == nil {
			t.Fatalf("wrong password %d accepted", i)
		}
	}

	var logins, enrolls []string
	counted := 0
	for _, e := range h.auditEntries(t) {
		raw, _ := json.Marshal(e)
		if strings.Contains(string(raw), "wrong-password") || strings.Contains(string(raw), bt.Token) {
			t.Errorf("an audit entry holds a secret: %s", raw)
		}
		switch e.Action {
		case AuditActionLogin:
			logins = append(logins, strings.Join([]string{e.Actor, e.Source, e.Object, e.Result}, " "))
			counted += e.Count
		case AuditActionEnroll:
			enrolls = append(enrolls, strings.Join([]string{e.Actor, e.Source, e.Object, e.Result, e.Detail}, " "))
		}
	}
	// The first of each, then their counts, written before the trail is
	// read.
	wantLogins := []string{"pi-guess 127.0.0.1 mqtt refused", "pi-guess 127.0.0.1 mqtt throttled",
		"pi-guess 127.0.0.1 mqtt refused", "pi-guess 127.0.0.1 mqtt throttled"}
	if strings.Join(logins, "\n") != strings.Join(wantLogins, "\n") || counted != guesses {
		t.Errorf("login entries (counting %d guesses, want %d):\n%s\nwant:\n%s", counted, guesses, strings.Join(logins, "\n"), strings.Join(wantLogins, "\n"))
	}
	if len(enrolls) == 0 || enrolls[0] != "bootstrap-token "+bt.ID+" 127.0.0.1 devices/pi-audited ok labels fleet/device=pi-audited,site=north" {
		t.Errorf("enroll entries:\n%s", strings.Join(enrolls, "\n"))
	}
	if !strings.Contains(h.logs.String(), `msg=audit`) || !strings.Contains(h.logs.String(), "action=enroll") {
		t.Error("the audit entries are not in the hub's log")
	}
}
