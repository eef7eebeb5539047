package client_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

func TestInfoAndBrokerURL(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	h.SetInfo(&schema.HubInfo{Version: "v1.2.3", Store: "s-1", MQTTURL: "tcp://10.0.0.5:1883"})
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != "v1.2.3" || info.Store != "s-1" {
		t.Fatalf("info %+v", info)
	}
	if u, guessed := c.BrokerURL(info); u != "tcp://10.0.0.5:1883" || guessed {
		t.Fatalf("broker URL %s (guessed %t)", u, guessed)
	}
	h.SetInfo(nil)
	if _, err := c.Info(ctx); !client.IsNotFound(err) {
		t.Fatalf("hub without /v1/info: %v", err)
	}
	// c talks to 127.0.0.1: a hub that says nothing gets its host and 1883.
	if u, guessed := c.BrokerURL(nil); u != "tcp://127.0.0.1:1883" || !guessed {
		t.Fatalf("fallback %s (guessed %t)", u, guessed)
	}
}

func TestBrokerURLHosts(t *testing.T) {
	for _, tt := range []struct {
		hub, mqtt, want string
		guessed         bool
	}{
		{"http://hub.lan:8080", "", "tcp://hub.lan:1883", true},
		{"https://[fd00::5]:8443", "", "tcp://[fd00::5]:1883", true},
		{"http://hub.lan:8080", "ssl://mqtt.example.com:8883", "ssl://mqtt.example.com:8883", false},
		// Listen addresses are not addresses to dial: the hub's host is.
		{"http://10.0.0.5:8080", "tcp://0.0.0.0:1883", "tcp://10.0.0.5:1883", false},
		{"http://10.0.0.5:8080", "tcp://[::]:1884", "tcp://10.0.0.5:1884", false},
		{"http://10.0.0.5:8080", "ssl://:8883", "ssl://10.0.0.5:8883", false},
		{"http://10.0.0.5:8080", "mqtts://", "mqtts://10.0.0.5:8883", false},
	} {
		c, err := client.New(tt.hub, "x")
		if err != nil {
			t.Fatal(err)
		}
		var info *schema.HubInfo
		if tt.mqtt != "" {
			info = &schema.HubInfo{MQTTURL: tt.mqtt}
		}
		if got, guessed := c.BrokerURL(info); got != tt.want || guessed != tt.guessed {
			t.Errorf("hub %s, mqtt %q: got %s (guessed %t), want %s (%t)", tt.hub, tt.mqtt, got, guessed, tt.want, tt.guessed)
		}
	}
	for _, tt := range []struct {
		url, host, port string
		tls             bool
	}{
		{"tcp://10.0.0.5:1883", "10.0.0.5", "1883", false},
		{"tcp://hub.lan", "hub.lan", "1883", false},
		{"ssl://hub.lan", "hub.lan", "8883", true},
		{"TLS://[fd00::5]:9999", "fd00::5", "9999", true},
	} {
		host, port, err := client.BrokerHostPort(tt.url)
		if err != nil || host != tt.host || port != tt.port || client.IsTLSBrokerURL(tt.url) != tt.tls {
			t.Errorf("%s: %s %s %v tls=%t", tt.url, host, port, err, client.IsTLSBrokerURL(tt.url))
		}
	}
}

func TestCredentials(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	l, err := c.ListCredentials(ctx)
	if err != nil || l.Items == nil || len(l.Items) != 0 {
		t.Fatalf("empty list: %+v %v", l, err)
	}
	cred, err := c.CreateCredential(ctx, "grafana", schema.RoleMonitor)
	if err != nil {
		t.Fatal(err)
	}
	if _, tok := h.Credential("grafana"); cred.Name != "grafana" || cred.Role != schema.RoleMonitor || cred.Token == "" || cred.Token != tok {
		t.Fatalf("created %+v", cred)
	}
	if _, err := c.CreateCredential(ctx, "grafana", schema.RoleMonitor); !client.IsAlreadyExists(err) {
		t.Fatalf("create again: %v", err)
	}
	if _, err := c.CreateCredential(ctx, "Bad_Name", schema.RoleMonitor); !client.IsInvalid(err) {
		t.Fatalf("bad name: %v", err)
	}
	l, err = c.ListCredentials(ctx)
	if err != nil || len(l.Items) != 1 || l.Items[0] != (schema.Credential{Name: "grafana", Role: schema.RoleMonitor}) {
		t.Fatalf("list (never with tokens): %+v %v", l, err)
	}
	if err := c.DeleteCredential(ctx, "grafana"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteCredential(ctx, "grafana"); !client.IsNotFound(err) {
		t.Fatalf("delete again: %v", err)
	}
	if err := c.DeleteCredential(ctx, ""); err == nil {
		t.Fatal("an empty name addressed the collection")
	}
}

func TestModifyDevice(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, []byte(webManifest), false); err != nil {
		t.Fatal(err)
	}
	// Someone else writes between our read and our write, once: the write
	// is refused and redone on the fresh device, so both changes survive.
	var calls atomic.Int32
	dev, written, err := c.ModifyDevice(ctx, "pi-1", func(d *schema.Device) (bool, error) {
		if calls.Add(1) == 1 {
			other := *d
			other.Status = nil
			other.Metadata.Labels = map[string]string{"site": "lab", "other": "x"}
			if _, err := c.UpdateDevice(ctx, &other); err != nil {
				return false, err
			}
		}
		d.Metadata.Labels["mine"] = "y"
		return true, nil
	})
	if err != nil || !written {
		t.Fatalf("modify: written %t, %v", written, err)
	}
	if calls.Load() != 2 || dev.Metadata.Labels["other"] != "x" || dev.Metadata.Labels["mine"] != "y" {
		t.Fatalf("after %d calls: %v", calls.Load(), dev.Metadata.Labels)
	}
	// No change, no write.
	before := h.Revision()
	if _, written, err := c.ModifyDevice(ctx, "pi-1", func(*schema.Device) (bool, error) { return false, nil }); err != nil || written || h.Revision() != before {
		t.Fatalf("unchanged: written %t, %v", written, err)
	}
	// A hub that always conflicts: the caller gets the conflict, in the end.
	h.Fail(http.MethodPut, "/v1/devices/pi-1", -1, http.StatusConflict, client.ReasonConflict)
	_, _, err = c.ModifyDevice(ctx, "pi-1", func(*schema.Device) (bool, error) { return true, nil })
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "after 5 attempts") {
		t.Fatalf("endless conflict: %v", err)
	}
	if _, _, err := c.ModifyDevice(ctx, "nope", func(*schema.Device) (bool, error) { return true, nil }); !client.IsNotFound(err) {
		t.Fatalf("missing device: %v", err)
	}
	// A cancelled context ends the retries.
	cctx, cancel := context.WithCancel(ctx)
	_, _, err = c.ModifyDevice(cctx, "pi-1", func(*schema.Device) (bool, error) { cancel(); return true, nil })
	if err == nil {
		t.Fatal("modify with a cancelled context succeeded")
	}
}

func TestParseLabelEdit(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		set     map[string]string
		remove  []string
		wantErr string
	}{
		{args: []string{"a=b", "c-", "d="}, set: map[string]string{"a": "b", "d": ""}, remove: []string{"c"}},
		{args: []string{"example.com/x=1", "a=b", "a=b"}, set: map[string]string{"example.com/x": "1", "a": "b"}},
		{args: nil, wantErr: "no label change"},
		{args: []string{"a"}, wantErr: `"a": want key=value`},
		{args: []string{"-"}, wantErr: `"-": want key=value`},
		{args: []string{"a=b", "a=c"}, wantErr: `label "a" is given twice`},
		{args: []string{"a=b", "a-"}, wantErr: `label "a" cannot be both set and removed`},
		{args: []string{"a=b c"}, wantErr: `value "b c"`},
		{args: []string{"Bad Key=x"}, wantErr: `key "Bad Key"`},
		{args: []string{"fleet/arch=arm"}, wantErr: "keys under fleet/ are set by the hub"},
		{args: []string{"fleet/device-"}, wantErr: "keys under fleet/ are set by the hub"},
		{args: []string{"fleet/custom=1"}, wantErr: "keys under fleet/ are set by the hub"},
	} {
		e, err := client.ParseLabelEdit(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(e.Set, tt.set) || strings.Join(e.Remove, ",") != strings.Join(tt.remove, ",") {
			t.Errorf("%q: %+v, %v", tt.args, e, err)
		}
	}
}

func TestLabelEditApply(t *testing.T) {
	cur := map[string]string{"fleet/device": "pi-1", "site": "lab", "env": "prod"}
	for _, tt := range []struct {
		args      []string
		overwrite bool
		want      map[string]string
		changed   bool
		absent    string
		wantErr   string
	}{
		{args: []string{"room=kitchen"}, want: map[string]string{"fleet/device": "pi-1", "site": "lab", "env": "prod", "room": "kitchen"}, changed: true},
		{args: []string{"site=lab"}, want: cur},
		{args: []string{"site=garage", "env=dev"}, wantErr: `label "env" already has the value "prod"` + "\n" + `label "site" already has the value "lab"`},
		{args: []string{"site=garage", "env-"}, overwrite: true, want: map[string]string{"fleet/device": "pi-1", "site": "garage"}, changed: true},
		{args: []string{"nope-"}, want: cur, absent: "nope"},
	} {
		e, err := client.ParseLabelEdit(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Apply(cur, tt.overwrite)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(res.Labels, tt.want) || res.Changed != tt.changed || strings.Join(res.Absent, ",") != tt.absent {
			t.Errorf("%q: %+v, %v", tt.args, res, err)
		}
	}
	if cur["site"] != "lab" || len(cur) != 3 {
		t.Fatalf("Apply changed its input: %v", cur)
	}
}
