package broker

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

func TestMosquittoPasswordHashFormat(t *testing.T) {
	h, err := MosquittoPasswordHash("secret")
	if err != nil {
		t.Fatal(err)
	}
	// $7$<iterations>$<base64 of 12 bytes>$<base64 of 64 bytes>
	if !regexp.MustCompile(`^\$7\$101\$[A-Za-z0-9+/]{16}\$[A-Za-z0-9+/]{86}==$`).MatchString(h) {
		t.Fatalf("hash %q has not the mosquitto_passwd format", h)
	}
	for pw, want := range map[string]bool{"secret": true, "Secret": false, "": false} {
		if ok, err := checkMosquittoHash(h, pw); err != nil || ok != want {
			t.Errorf("check(%q) = %v, %v; want %v", pw, ok, err, want)
		}
	}
	h2, _ := MosquittoPasswordHash("secret")
	if h2 == h {
		t.Error("two hashes of the same password share a salt")
	}
}

// TestMosquittoPasswdCompatible checks the Go hash against what the real
// mosquitto_passwd writes (the broker itself accepting Go hashes is proven
// by TestMosquittoAccess).
func TestMosquittoPasswdCompatible(t *testing.T) {
	bin := sysdeps.Require(t, "mosquitto_passwd")
	f := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-b", f, "pi-1", "tok:en with spaces").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
	}
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	user, hash, ok := strings.Cut(strings.TrimSpace(string(data)), ":")
	if !ok || user != "pi-1" {
		t.Fatalf("unexpected password file %q", data)
	}
	if ok, err := checkMosquittoHash(hash, "tok:en with spaces"); err != nil || !ok {
		t.Fatalf("Go PBKDF2 does not reproduce mosquitto_passwd's hash %q: %v %v", hash, ok, err)
	}
}

func TestMosquittoPasswordFile(t *testing.T) {
	pw, err := MosquittoPasswordFile([]MosquittoAccount{
		{Identity: Identity{Name: "pi-1", Role: RoleDevice}, Password: "a"},
		{Identity: Identity{Name: "fleet.hub", Role: RoleHub}, Password: "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(pw)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "pi-1:$7$101$") || !strings.HasPrefix(lines[1], "fleet.hub:$7$101$") {
		t.Fatalf("password file:\n%s", pw)
	}
	for _, bad := range [][]MosquittoAccount{
		{{Identity: Identity{Name: "a:b", Role: RoleHub}, Password: "x"}},
		{{Identity: Identity{Name: "a b", Role: RoleHub}, Password: "x"}},
		{{Identity: Identity{Name: "+", Role: RoleMonitor}, Password: "x"}},
		{{Identity: Identity{Name: "Pi_1", Role: RoleDevice}, Password: "x"}},
		{{Identity: Identity{Name: "pi-1", Role: RoleDevice}, Password: ""}},
		{{Identity: Identity{Name: "pi-1", Role: RoleDevice}, Password: "x"}, {Identity: Identity{Name: "pi-1", Role: RoleHub}, Password: "y"}},
		{{Identity: Identity{Name: "x"}, Password: "x"}},
	} {
		if _, err := MosquittoPasswordFile(bad); err == nil {
			t.Errorf("MosquittoPasswordFile(%+v) succeeded", bad)
		}
	}
}

func TestMosquittoACLFile(t *testing.T) {
	acl, err := MosquittoACLFile(schema.Topics{}, []Identity{
		{Name: "pi-1", Role: RoleDevice},
		{Name: "fleet.hub", Role: RoleHub},
		{Name: "grafana", Role: RoleMonitor},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `# Fleet MQTT access rules; generated, do not edit.
# Devices (username = device name): own desired, requests and certificate in, own status/online/events/crashreports/responses/csr out.
pattern read fleet/v1/devices/%u/desired
pattern read fleet/v1/devices/%u/requests
pattern read fleet/v1/devices/%u/certificate
pattern write fleet/v1/devices/%u/status
pattern write fleet/v1/devices/%u/online
pattern write fleet/v1/devices/%u/events
pattern write fleet/v1/devices/%u/crashreports
pattern write fleet/v1/devices/%u/responses
pattern write fleet/v1/devices/%u/csr

user fleet.hub
topic readwrite fleet/v1/#
topic readwrite homeassistant/#

user grafana
topic deny fleet/v1/devices/grafana/#
topic read fleet/v1/devices/+/status
topic read fleet/v1/devices/+/online
topic read fleet/v1/devices/+/events
topic read fleet/v1/deployments/+/status
topic read homeassistant/#
`
	if string(acl) != want {
		t.Fatalf("ACL file:\n%s\nwant:\n%s", acl, want)
	}
}

func TestMosquittoConfFile(t *testing.T) {
	conf, err := MosquittoConfFile(MosquittoConf{Port: 1883, Bind: "127.0.0.1", PasswordFile: "/etc/fleet/passwd", ACLFile: "/etc/fleet/acl"})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"listener 1883 127.0.0.1\n",
		"allow_anonymous false\n",
		"password_file /etc/fleet/passwd\n",
		"acl_file /etc/fleet/acl\n",
		"persistence false\n",
		"max_packet_size 262144\n",
	} {
		if !bytes.Contains(conf, []byte(line)) {
			t.Errorf("mosquitto.conf lacks %q:\n%s", line, conf)
		}
	}
	for _, bad := range []MosquittoConf{
		{Port: 0, PasswordFile: "/p", ACLFile: "/a"},
		{Port: 1883, PasswordFile: "p", ACLFile: "/a"},
		{Port: 1883, PasswordFile: "/p"},
		{Port: 1883, PasswordFile: "/p\nallow_anonymous true", ACLFile: "/a"},
		{Port: 1883, PasswordFile: "/p", ACLFile: "/a", Bind: "0.0.0.0\nallow_anonymous true"},
	} {
		if _, err := MosquittoConfFile(bad); err == nil {
			t.Errorf("MosquittoConfFile(%+v) succeeded", bad)
		}
	}
}
