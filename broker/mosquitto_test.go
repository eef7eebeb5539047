package broker_test

import (
	"testing"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
)

// TestMosquittoAccess runs the access suite against a real Mosquitto 2
// configured with the generated password file ($7$ hashes made in Go), ACL
// file and mosquitto.conf.
func TestMosquittoAccess(t *testing.T) {
	m := mosquittotest.Start(t, mosquittotest.Config{Topics: topics, Accounts: testAccounts()})
	testAccess(t, target{url: m.URL})
}

// TestMosquittoRevokedAccount: rewriting the files and reloading is how a
// removed device or a rotated token takes effect on Mosquitto.
func TestMosquittoRevokedAccount(t *testing.T) {
	m := mosquittotest.Start(t, mosquittotest.Config{Topics: topics, Accounts: testAccounts()})
	c1 := mustDial(t, m.URL, dev1)
	c2 := mustDial(t, m.URL, dev2)

	// pi-1 removed, pi-2's token rotated.
	var next []broker.MosquittoAccount
	for _, a := range testAccounts() {
		switch a.Name {
		case dev1.Name:
			continue
		case dev2.Name:
			a.Password = "token-2-rotated"
		}
		next = append(next, a)
	}
	m.SetAccounts(t, next)
	c1.awaitLost()
	c2.awaitLost()
	if _, err := dial(t, m.URL, dev1.Name, passwordOf(dev1.Name), clientOpts{}); err == nil {
		t.Fatal("removed account still connects after reload")
	}
	if _, err := dial(t, m.URL, dev2.Name, passwordOf(dev2.Name), clientOpts{}); err == nil {
		t.Fatal("old token still works after rotation")
	}
	if _, err := dial(t, m.URL, dev2.Name, "token-2-rotated", clientOpts{}); err != nil {
		t.Fatalf("rotated token: %v", err)
	}
	mustDial(t, m.URL, hubID)
}
