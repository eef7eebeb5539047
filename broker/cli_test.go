package broker_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// mosquittoCLI runs mosquitto_sub or mosquitto_pub against the broker.
func mosquittoCLI(t *testing.T, port int, tool string, args ...string) (string, error) {
	t.Helper()
	bin := sysdeps.Require(t, tool)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	args = append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// TestEmbeddedWithMosquittoClients: the stock CLI tools, MQTT 3.1.1 and 5,
// work against the embedded broker, ACLs included.
func TestEmbeddedWithMosquittoClients(t *testing.T) {
	b, _ := startBroker(t)
	port := b.Addr().(*net.TCPAddr).Port
	ctx := ctxTimeout(t)
	conn := b.InlineConn()
	t.Cleanup(func() { conn.Close() })
	desired1 := topics.Device(dev1.Name, schema.TopicDesired)
	status1 := topics.Device(dev1.Name, schema.TopicStatus)
	if err := conn.Publish(ctx, desired1, []byte(`{"generation":3}`), true); err != nil {
		t.Fatal(err)
	}
	statuses := make(chan string, 10)
	if err := conn.Subscribe(ctx, topics.DeviceFilter(schema.TopicStatus), func(_ string, p []byte) { statuses <- string(p) }); err != nil {
		t.Fatal(err)
	}

	for _, v := range []string{"mqttv311", "mqttv5"} {
		out, err := mosquittoCLI(t, port, "mosquitto_sub", "-V", v, "-u", dev1.Name, "-P", passwordOf(dev1.Name),
			"-i", dev1.Name, "-t", desired1, "-q", "1", "-C", "1", "-W", "10")
		if err != nil || strings.TrimSpace(out) != `{"generation":3}` {
			t.Fatalf("mosquitto_sub %s: %v: %q", v, err, out)
		}

		payload := `{"device":"pi-1","via":"` + v + `"}`
		if out, err := mosquittoCLI(t, port, "mosquitto_pub", "-V", v, "-u", dev1.Name, "-P", passwordOf(dev1.Name),
			"-i", dev1.Name, "-t", status1, "-q", "1", "-r", "-m", payload); err != nil {
			t.Fatalf("mosquitto_pub %s: %v: %s", v, err, out)
		}
		select {
		case got := <-statuses:
			if got != payload {
				t.Fatalf("status %q, want %q", got, payload)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("mosquitto_pub %s: status not received", v)
		}
	}

	// Refusals the CLI reports: bad password, another device's desired.
	if out, err := mosquittoCLI(t, port, "mosquitto_pub", "-u", dev1.Name, "-P", "wrong", "-t", status1, "-m", "x"); err == nil {
		t.Fatalf("mosquitto_pub with a wrong password succeeded: %s", out)
	}
	out, err := mosquittoCLI(t, port, "mosquitto_sub", "-u", dev1.Name, "-P", passwordOf(dev1.Name), "-i", dev1.Name,
		"-t", topics.Device(dev2.Name, schema.TopicDesired), "-q", "1", "-E")
	if !strings.Contains(out, "denied") { // mosquitto_sub -E exits 0 here
		t.Fatalf("mosquitto_sub to another device's desired: err=%v, output %q; want a denial", err, out)
	}
}
