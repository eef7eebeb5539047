package enroll

import (
	"net"
	"strings"
	"testing"
)

// TestRunTriesEveryBroker: with the first broker of the list down (its
// port closed), Run's next attempt goes to the second one and enrolls
// there.
func TestRunTriesEveryBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "tcp://" + ln.Addr().String()
	ln.Close()
	h := startFakeHub(t, grant)
	o := options(t, h, t.TempDir())
	o.Broker, o.Brokers = "", []string{down, h.url}
	id, err := Run(ctxT(t), o)
	if err != nil || id.Token != "device-token-of-pi-1" {
		t.Fatalf("Run = %+v, %v", id, err)
	}
	if n := len(h.seen()); n != 1 {
		t.Fatalf("the second broker's hub saw %d requests, want 1", n)
	}
	o.Brokers = []string{h.url, "ssl//x"}
	if _, err := Run(ctxT(t), o); err == nil || !strings.Contains(err.Error(), "broker 2 of 2") {
		t.Fatalf("Run with a malformed second broker: %v", err)
	}
}
