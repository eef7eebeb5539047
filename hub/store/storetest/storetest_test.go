package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// TestConformanceBadger runs the suite on Badger on disk.
func TestConformanceBadger(t *testing.T) {
	Run(t, func(t *testing.T) Backend {
		dir := filepath.Join(t.TempDir(), "store")
		return Backend{
			Open: func(t *testing.T, opts store.Options) (*store.Store, error) {
				opts.Dir = dir
				return store.Open(opts)
			},
			AtRest: []string{dir},
		}
	})
}

// TestConformanceEtcd runs the suite on a real 3-member etcd cluster on
// loopback; each test has its own prefix (one cluster, several fleets).
func TestConformanceEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	var n atomic.Int64
	Run(t, func(t *testing.T) Backend {
		return etcdBackend(t, c, fmt.Sprintf("/conformance/%d/", n.Add(1)), nil)
	})
}

// etcdBackend is a fresh hub data directory (its secrets.key and fleet-id)
// on prefix of cluster c.
func etcdBackend(t *testing.T, c *etcdtest.Cluster, prefix string, tweak func(*store.EtcdOptions)) Backend {
	hubDir := t.TempDir()
	disruptions := 0
	var dirs []string
	for _, m := range c.Members {
		dirs = append(dirs, m.DataDir)
	}
	return Backend{
		Open: func(t *testing.T, opts store.Options) (*store.Store, error) {
			tlsCfg, err := c.ClientTLS()
			if err != nil {
				return nil, err
			}
			opts.Dir = filepath.Join(hubDir, "store")
			e := &store.EtcdOptions{Endpoints: c.Endpoints(), Prefix: prefix, TLS: tlsCfg}
			if tweak != nil {
				tweak(e)
			}
			opts.Etcd = e
			return store.Open(opts)
		},
		AtRest: dirs,
		// A follower first, then the raft leader.
		Disrupt: func(t *testing.T) func() {
			cli := c.Client(t)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			lead, err := c.Leader(ctx, cli)
			if err != nil {
				t.Fatal(err)
			}
			victim, role := lead, "leader"
			if disruptions++; disruptions%2 == 1 {
				victim, role = (lead+1)%len(c.Members), "follower"
			}
			m := c.Members[victim]
			t.Logf("kill -9 of etcd %s %s", role, m.Name)
			m.Kill()
			return func() { c.Restart(t, m) }
		},
	}
}
