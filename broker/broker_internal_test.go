package broker

import (
	"log/slog"
	"testing"
	"time"
)

var discard = slog.New(slog.DiscardHandler)

func TestNewCapabilities(t *testing.T) {
	b, err := New(Options{Addr: "127.0.0.1:0", Auth: NewStaticAuth(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	caps := b.server.Options.Capabilities
	// Retained desired state must never expire (mochi's default is 24 h).
	if caps.MaximumMessageExpiryInterval != 0 {
		t.Errorf("MaximumMessageExpiryInterval = %d, want 0", caps.MaximumMessageExpiryInterval)
	}
	if caps.MaximumClientWritesPending != DefaultMaxClientWritesPending {
		t.Errorf("MaximumClientWritesPending = %d, want %d", caps.MaximumClientWritesPending, DefaultMaxClientWritesPending)
	}
	if caps.MaximumPacketSize != DefaultMaxPacketSize {
		t.Errorf("MaximumPacketSize = %d, want %d", caps.MaximumPacketSize, DefaultMaxPacketSize)
	}
	if caps.TopicAliasMaximum != 0 {
		t.Errorf("TopicAliasMaximum = %d, want 0", caps.TopicAliasMaximum)
	}
	if caps.MaximumSessionExpiryInterval != uint32(DefaultSessionExpiry/time.Second) {
		t.Errorf("MaximumSessionExpiryInterval = %d", caps.MaximumSessionExpiryInterval)
	}
	if !b.server.Options.InlineClient {
		t.Error("inline client disabled")
	}
}
