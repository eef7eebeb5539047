package brokertest

import (
	"log/slog"
	"net"
	"testing"

	"github.com/fleetmq/fleet/broker"
)

// TestStart: the broker listens once Start returns, and stops with the
// (sub)test that started it.
func TestStart(t *testing.T) {
	var addr string
	t.Run("running", func(t *testing.T) {
		b := Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: broker.NewStaticAuth(), Logger: slog.New(slog.DiscardHandler)})
		addr = b.Addr().String()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial the started broker: %v", err)
		}
		c.Close()
	})
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("the broker still listens on %s after its test ended", addr)
	}
}
