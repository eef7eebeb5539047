package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fleetmq/fleet/test/etcdtest"
)

// startStore starts what -store names and returns the hub's store flags:
// none for Badger; for etcd, a 3-member cluster on loopback (plain TCP:
// the suite measures the store, not TLS) under the run's directory, with
// the fleet under its own prefix.
func (s *suite) startStore() ([]string, error) {
	if s.o.Store != "etcd" {
		return nil, nil
	}
	c, err := etcdtest.StartCluster(filepath.Join(s.dir, "etcd"), etcdtest.Options{Members: 3})
	if err != nil {
		return nil, fmt.Errorf("-store etcd: %w", err)
	}
	s.etcd = c
	s.log.Info("etcd cluster started", "endpoints", strings.Join(c.Endpoints(), ","))
	return []string{"--store", "etcd://" + strings.Join(c.HostPorts(), ","), "--etcd-prefix", "/fleet/scale/"}, nil
}
