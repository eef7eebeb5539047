package storetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// TestConformanceEtcdTwoStores runs the shared part of the suite: two
// stores, as two hubs would open them, on one prefix of a real 3-member
// etcd cluster.
func TestConformanceEtcdTwoStores(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	var n atomic.Int64
	RunShared(t, func(t *testing.T) SharedBackend {
		prefix := fmt.Sprintf("/shared/%d/", n.Add(1))
		hubs := []Backend{etcdBackend(t, c, prefix, nil), etcdBackend(t, c, prefix, nil)}
		dirs := []string{t.TempDir(), t.TempDir()}
		return SharedBackend{Open: func(t *testing.T, hub int, opts store.Options) (*store.Store, error) {
			if hub == 1 {
				// The second hub gets the first one's Secrets key file.
				key, err := os.ReadFile(filepath.Join(dirs[0], store.SecretKeyFileName))
				if err != nil {
					return nil, err
				}
				if err := os.WriteFile(filepath.Join(dirs[1], store.SecretKeyFileName), key, 0o600); err != nil {
					return nil, err
				}
			}
			opts.SecretKeyFile = filepath.Join(dirs[hub], store.SecretKeyFileName)
			return hubs[hub].Open(t, opts)
		}}
	})
}
