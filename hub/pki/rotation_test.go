package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

// fakeClock is an injectable clock for ServerTLS.Run: Now is set by the
// test, and a timer fires when the test advances past its deadline.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if !t.at.After(c.now) {
		t.c <- c.now
		return t.c
	}
	c.timers = append(c.timers, t)
	return t.c
}

// Advance moves the clock and fires the timers now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.c <- c.now
	}
	c.timers = kept
}

// Waiting reports how many timers are pending.
func (c *fakeClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func verifyServerLeaf(t *testing.T, leaf *x509.Certificate, roots *x509.CertPool, at time.Time) error {
	t.Helper()
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// TestServerCertRenewedAtTwoThirds: a 3-minute certificate is kept until
// two thirds of its life, then a new one is issued by the same CA and
// served on the next handshake (GetCertificate), with the CA in its
// chain; a restart within the window keeps the current one.
func TestServerCertRenewedAtTwoThirds(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().UTC().Truncate(time.Second)
	st, err := NewServerTLS(ServerTLSOptions{DataDir: dir, SANs: []string{"localhost", "127.0.0.1"}, Lifetime: 3 * time.Minute, Now: t0, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	first := st.Leaf()
	if !first.NotAfter.Equal(t0.Add(3*time.Minute)) || !st.NextRenewal().Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("certificate until %s, renewal at %s; want %s and %s", first.NotAfter, st.NextRenewal(), t0.Add(3*time.Minute), t0.Add(2*time.Minute))
	}
	if issued, err := st.RenewIfDue(t0.Add(119 * time.Second)); err != nil || issued {
		t.Fatalf("before two thirds: issued %v, %v", issued, err)
	}
	if again, err := NewServerTLS(ServerTLSOptions{DataDir: dir, SANs: []string{"localhost"}, Lifetime: 3 * time.Minute, Now: t0.Add(time.Minute)}); err != nil || again.Leaf().SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("a restart inside the lifetime replaced the certificate: %v", err)
	}
	if issued, err := st.RenewIfDue(t0.Add(2 * time.Minute)); err != nil || !issued {
		t.Fatalf("at two thirds: issued %v, %v", issued, err)
	}
	got, err := st.Config().GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Leaf.SerialNumber.Cmp(first.SerialNumber) == 0 || !got.Leaf.NotAfter.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("the next handshake gets serial %v until %s", got.Leaf.SerialNumber, got.Leaf.NotAfter)
	}
	if err := verifyServerLeaf(t, got.Leaf, st.CAs().Pool(), t0.Add(4*time.Minute)); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
	if len(got.Certificate) != 2 {
		t.Errorf("chain of %d certificates, want the leaf and the CA", len(got.Certificate))
	}
	if on := readCert(t, filepath.Join(dir, ServerCertName)); on.SerialNumber.Cmp(got.Leaf.SerialNumber) != 0 {
		t.Error("hub.crt on disk is not the renewed certificate")
	}
	if st.Renewals() != 2 {
		t.Errorf("Renewals = %d, want 2 (the first and the renewal)", st.Renewals())
	}
}

// TestServerTLSRunRenewsOnItsClock: Run waits on its clock until the
// renewal is due, renews, and waits for the next one.
func TestServerTLSRunRenewsOnItsClock(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Second)
	clk := &fakeClock{now: t0}
	st, err := NewServerTLS(ServerTLSOptions{DataDir: t.TempDir(), SANs: []string{"localhost"}, Lifetime: 90 * time.Second, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	st.now, st.after = clk.Now, clk.After
	done := make(chan error, 1)
	go func() { done <- st.Run(t.Context()) }()
	awaitCond(t, "Run to wait for the renewal", func() bool { return clk.Waiting() == 1 })
	before := st.Leaf()
	clk.Advance(59 * time.Second)
	if st.Leaf() != before || clk.Waiting() != 1 {
		t.Fatal("renewed before two thirds of the lifetime")
	}
	clk.Advance(time.Second) // 60 s of 90: due
	awaitCond(t, "the renewal", func() bool { return st.Renewals() == 2 })
	if !st.Leaf().NotAfter.Equal(t0.Add(150 * time.Second)) {
		t.Errorf("renewed until %s, want %s", st.Leaf().NotAfter, t0.Add(150*time.Second))
	}
	awaitCond(t, "Run to wait for the next renewal", func() bool { return clk.Waiting() == 1 })
	clk.Advance(60 * time.Second)
	awaitCond(t, "the second renewal", func() bool { return st.Renewals() == 3 })
}

// TestCARotation: Rotate brings a second CA into the bundle and the
// client pool while the old one still signs; Complete makes the new one
// sign (the server certificate is reissued by it), retires the old (its
// certificate kept in ca-retired.crt, its key gone) and refuses client
// certificates of the old CA. A reload sees the same state, and a
// completion a crash cut short is finished on load.
func TestCARotation(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	t0 := time.Now()
	st, err := NewServerTLS(ServerTLSOptions{DataDir: dir, SANs: []string{"localhost"}, Now: t0, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cas := st.CAs()
	oldCA, _ := cas.Active()
	clientCA := NewClientCAOf(cas)
	sign := func(dev string) *x509.Certificate {
		csrPEM, err := enroll.ClientCSR(t.TempDir(), dev)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := ParseCSR(string(csrPEM), dev)
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := clientCA.Sign(csr, dev)
		if err != nil {
			t.Fatal(err)
		}
		return parseCertPEM(t, string(p))
	}
	verifyClient := func(c *x509.Certificate) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: clientCA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	oldClient := sign("pi-1")
	if _, err := cas.Complete(); !errors.Is(err, ErrNoRotation) {
		t.Fatalf("Complete without a rotation: %v", err)
	}

	rot, err := cas.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if rot.Active != schema.CAHash(oldCA) || rot.Next == "" || rot.Next == rot.Active {
		t.Fatalf("status after Rotate: %+v", rot)
	}
	if _, err := cas.Rotate(); !errors.Is(err, ErrRotating) {
		t.Fatalf("a second Rotate: %v", err)
	}
	bundle, err := enroll.ParseCABundle(cas.BundlePEM())
	if err != nil || len(bundle) != 2 || schema.CAHash(bundle[0]) != rot.Active || schema.CAHash(bundle[1]) != rot.Next {
		t.Fatalf("bundle during the rotation: %d CAs, %v", len(bundle), err)
	}
	for _, name := range []string{NextCACertName, NextCAKeyName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, NextCAKeyName)); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v", NextCAKeyName, fi.Mode().Perm())
	}
	// The old CA still signs: every device trusts it.
	if issued, err := st.RenewIfDue(t0); err != nil || issued {
		t.Fatalf("the server certificate was reissued by Rotate: %v %v", issued, err)
	}
	if again, err := LoadCAs(dir, t0, log); err != nil || again.Status().Next != rot.Next {
		t.Fatalf("reload during the rotation: %v %+v", err, again.Status())
	}
	duringClient := sign("pi-2")
	if err := verifyClient(oldClient); err != nil {
		t.Errorf("a client certificate of the old CA during the overlap: %v", err)
	}
	if err := duringClient.CheckSignatureFrom(oldCA); err != nil {
		t.Errorf("during the overlap the old CA signs client certificates: %v", err)
	}

	done, err := cas.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if done.Active != rot.Next || done.Next != "" || len(done.Retired) != 1 || done.Retired[0] != rot.Active {
		t.Fatalf("status after Complete: %+v", done)
	}
	newCA, _ := cas.Active()
	if issued, err := st.RenewIfDue(t0); err != nil || !issued {
		t.Fatalf("the server certificate was not reissued by the new CA: %v %v", issued, err)
	}
	if err := st.Leaf().CheckSignatureFrom(newCA); err != nil {
		t.Errorf("server certificate after Complete: %v", err)
	}
	oldPool := x509.NewCertPool()
	oldPool.AddCert(oldCA)
	if err := verifyServerLeaf(t, st.Leaf(), oldPool, t0); err == nil {
		t.Error("the new server certificate verifies against the retired CA")
	}
	if err := verifyClient(oldClient); err == nil {
		t.Error("a client certificate of the retired CA is still accepted")
	}
	if err := verifyClient(sign("pi-3")); err != nil {
		t.Errorf("a client certificate of the new CA: %v", err)
	}
	if b, _ := enroll.ParseCABundle(cas.BundlePEM()); len(b) != 1 || schema.CAHash(b[0]) != done.Active {
		t.Errorf("bundle after Complete: %d CAs", len(b))
	}
	if _, err := os.Stat(filepath.Join(dir, NextCAKeyName)); !os.IsNotExist(err) {
		t.Errorf("%s after Complete: %v", NextCAKeyName, err)
	}
	if again, err := LoadCAs(dir, t0, log); err != nil || again.Status().Active != done.Active || len(again.Status().Retired) != 1 {
		t.Fatalf("reload after Complete: %v %+v", err, again.Status())
	}

	// A crash after ca.key became the next key, before ca.crt did.
	if _, err := cas.Rotate(); err != nil {
		t.Fatal(err)
	}
	nextKey, _ := os.ReadFile(filepath.Join(dir, NextCAKeyName))
	nextCert, _ := os.ReadFile(filepath.Join(dir, NextCACertName))
	if err := os.WriteFile(filepath.Join(dir, CAKeyName), nextKey, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := LoadCAs(dir, t0, log)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, CACertName)); !bytes.Equal(got, nextCert) || again.Status().Next != "" {
		t.Errorf("an interrupted completion was not finished: %+v", again.Status())
	}
}
