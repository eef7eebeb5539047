package storetest

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// prefixKeys is every key under prefix, with its mod revision.
func prefixKeys(t *testing.T, cli *clientv3.Client, prefix string) map[string]int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

func sameKeys(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func openEtcd(hubDir string, c *etcdtest.Cluster, prefix string) (*store.Store, error) {
	tlsCfg, err := c.ClientTLS()
	if err != nil {
		return nil, err
	}
	return store.Open(store.Options{
		Dir: filepath.Join(hubDir, "store"), GCInterval: -1,
		Etcd: &store.EtcdOptions{Endpoints: c.Endpoints(), Prefix: prefix, TLS: tlsCfg},
	})
}

// TestEtcdBadInput: a hub refuses an etcd prefix that is not its fleet's,
// and a second hub with another Secrets key, with clear errors and without
// writing to the store.
func TestEtcdBadInput(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	hubA, hubB := t.TempDir(), t.TempDir()
	for hub, prefix := range map[string]string{hubA: "/fleet-a/", hubB: "/fleet-b/"} {
		s, err := openEtcd(hub, c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, Device("d-"+strings.Trim(prefix, "/")), false); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("PrefixOfAnotherFleet", func(t *testing.T) {
		before := prefixKeys(t, cli, "/fleet-b/")
		_, err := openEtcd(hubA, c, "/fleet-b/")
		if !errors.Is(err, store.ErrForeignStore) || !strings.Contains(err.Error(), "/fleet-b/") || !strings.Contains(err.Error(), "belongs to fleet") {
			t.Fatalf("hub of fleet A on fleet B's prefix: %v, want ErrForeignStore naming the prefix", err)
		}
		t.Logf("error: %v", err)
		if after := prefixKeys(t, cli, "/fleet-b/"); !sameKeys(before, after) {
			t.Fatal("the refused hub wrote to fleet B's prefix")
		}
	})
	t.Run("EmptyPrefixForAPinnedHub", func(t *testing.T) {
		_, err := openEtcd(hubA, c, "/fleet-typo/")
		if !errors.Is(err, store.ErrForeignStore) {
			t.Fatalf("hub of fleet A on an empty prefix: %v, want ErrForeignStore", err)
		}
		if keys := prefixKeys(t, cli, "/fleet-typo/"); len(keys) != 0 {
			t.Fatalf("the refused hub wrote %d keys", len(keys))
		}
	})
	t.Run("PrefixWithOtherData", func(t *testing.T) {
		if _, err := cli.Put(ctx, "/app/config", "x"); err != nil {
			t.Fatal(err)
		}
		_, err := openEtcd(t.TempDir(), c, "/app/")
		if !errors.Is(err, store.ErrForeignStore) || !strings.Contains(err.Error(), "not a Fleet store") {
			t.Fatalf("a prefix with another application's key: %v, want ErrForeignStore", err)
		}
		if keys := prefixKeys(t, cli, "/app/"); len(keys) != 1 {
			t.Fatalf("the refused hub wrote: %v", keys)
		}
	})
	t.Run("SecondHubWithAnotherKey", func(t *testing.T) {
		before := prefixKeys(t, cli, "/fleet-a/")
		hub2 := t.TempDir()
		other := []byte("c2Vjb25kLWh1Yi1rZXktLS0tLS0tLS0tLS0tLS0tLS0=\n") // 32 bytes
		if err := os.WriteFile(filepath.Join(hub2, store.SecretKeyFileName), other, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := openEtcd(hub2, c, "/fleet-a/")
		if !errors.Is(err, store.ErrSecretKey) || !strings.Contains(err.Error(), "encrypted with key") {
			t.Fatalf("second hub with another key: %v, want ErrSecretKey", err)
		}
		t.Logf("error: %v", err)
		_, err = openEtcd(t.TempDir(), c, "/fleet-a/")
		if !errors.Is(err, store.ErrSecretKey) || !strings.Contains(err.Error(), "copy it from the first hub") {
			t.Fatalf("second hub without the key: %v, want ErrSecretKey", err)
		}
		if after := prefixKeys(t, cli, "/fleet-a/"); !sameKeys(before, after) {
			t.Fatal("a refused hub wrote to the store")
		}
		if _, err := os.Stat(filepath.Join(hub2, store.FleetIDFileName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused hub pinned itself to the fleet: %v", err)
		}
	})
	t.Run("SecondHubWithTheKeyFiles", func(t *testing.T) {
		hub2 := t.TempDir()
		key, err := os.ReadFile(filepath.Join(hubA, store.SecretKeyFileName))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hub2, store.SecretKeyFileName), key, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := openEtcd(hub2, c, "/fleet-a/")
		if err != nil {
			t.Fatalf("second hub with the fleet's key: %v", err)
		}
		defer s.Close()
		if _, err := s.Get(ctx, "Device", "d-fleet-a"); err != nil {
			t.Fatalf("second hub does not see the first one's device: %v", err)
		}
	})
	t.Run("NoQuorumAtStart", func(t *testing.T) { noQuorumAtStart(t, c) })
}

// noQuorumAtStart: with two of three members killed, Open fails naming
// the endpoints and leaves the hub's data dir empty.
func noQuorumAtStart(t *testing.T, c *etcdtest.Cluster) {
	c.Members[0].Kill()
	c.Members[1].Kill()
	hub := t.TempDir()
	start := time.Now()
	_, err := openEtcd(hub, c, "/fleet-new/")
	t.Logf("open with 1 of 3 members up failed after %v: %v", time.Since(start), err)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), c.Members[2].ClientURL) {
		t.Fatalf("open without a quorum: %v, want ErrUnavailable naming the endpoints", err)
	}
	if entries, _ := os.ReadDir(hub); len(entries) != 0 {
		t.Fatalf("a failed open wrote %v in the hub's data dir", entries)
	}
}

// TestEtcdUnreachableAtStart: nothing listens at the endpoints: Open fails
// within its dial timeout with an error that names them.
func TestEtcdUnreachableAtStart(t *testing.T) {
	hub := t.TempDir()
	start := time.Now()
	_, err := store.Open(store.Options{
		Dir: filepath.Join(hub, "store"),
		Etcd: &store.EtcdOptions{
			Endpoints:   []string{"http://127.0.0.1:1", "http://127.0.0.1:9"},
			DialTimeout: 2 * time.Second,
		},
	})
	took := time.Since(start)
	t.Logf("open on unreachable endpoints failed after %v: %v", took, err)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("open on unreachable endpoints: %v, want ErrUnavailable naming them", err)
	}
	if entries, _ := os.ReadDir(hub); len(entries) != 0 {
		t.Fatalf("a failed open wrote %v in the hub's data dir", entries)
	}
}

// TestEtcdTLSClientCertificates: the store runs on a cluster that requires
// client certificates, with the files LoadEtcdTLS reads; without a
// certificate, Open fails clearly.
func TestEtcdTLSClientCertificates(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	ca, crt, key := c.CertFiles()
	cfg, err := store.LoadEtcdTLS(ca, crt, key)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := store.ParseStoreURL("etcd://"+strings.Join(c.HostPorts(), ","), true)
	if err != nil {
		t.Fatal(err)
	}
	hub := t.TempDir()
	open := func(cfg *tls.Config) (*store.Store, error) {
		return store.Open(store.Options{Dir: filepath.Join(hub, "store"), GCInterval: -1,
			Etcd: &store.EtcdOptions{Endpoints: eps, TLS: cfg, DialTimeout: 3 * time.Second}})
	}
	s, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Create(ctx, Device("d1"), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	noCert, err := store.LoadEtcdTLS(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(noCert); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("open without a client certificate: %v, want ErrUnavailable", err)
	}
	if _, err := store.LoadEtcdTLS(ca, crt, ""); err == nil || !strings.Contains(err.Error(), "--etcd-key") {
		t.Fatalf("a certificate without its key: %v", err)
	}
}
