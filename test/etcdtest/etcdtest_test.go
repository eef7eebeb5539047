package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterServesTheClient: the etcd v3.6 client (the store's) works
// against the 3-member cluster of Debian's etcd 3.4 server: writes,
// transactions, watch from a revision, and a quorum left after a kill -9.
func TestClusterServesTheClient(t *testing.T) {
	c := Start(t, Options{})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("k"), "=", put.Header.Revision)).
		Then(clientv3.OpPut("k", "v2")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("txn: %+v, %v", txn, err)
	}
	wch := cli.Watch(ctx, "k", clientv3.WithRev(put.Header.Revision))
	var seen []string
	for len(seen) < 2 {
		resp := <-wch
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			seen = append(seen, string(ev.Kv.Value))
		}
	}
	if seen[0] != "v1" || seen[1] != "v2" {
		t.Fatalf("watch from revision %d saw %v", put.Header.Revision, seen)
	}
	lead, err := c.Leader(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	c.Members[lead].Kill()
	// A write in flight while the members elect a new leader may fail (the
	// client does not retry writes): a quorum takes it again within the
	// election timeout.
	for {
		_, err := cli.Put(ctx, "k", "v3")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("put after killing the leader: %v", err)
		}
	}
	got, err := cli.Get(ctx, "k")
	if err != nil || string(got.Kvs[0].Value) != "v3" {
		t.Fatalf("get: %+v, %v", got, err)
	}
}

// TestTLSClusterNeedsAClientCertificate: with TLS, the cluster serves a
// client with the certificate and refuses one without.
func TestTLSClusterNeedsAClientCertificate(t *testing.T) {
	c := Start(t, Options{TLS: true})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = nil
	anon, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	defer acancel()
	if _, err := anon.Get(actx, "k"); err == nil {
		t.Fatal("a client without a certificate read the cluster")
	}
}
