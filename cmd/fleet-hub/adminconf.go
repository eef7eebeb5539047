package main

import (
	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub/adminconf"
)

// adminConfigFormat is admin.conf's format, which package client owns
// (the fleet CLI reads the file as any config file), given to the hub,
// which must not import client.
type adminConfigFormat struct{}

var _ adminconf.Format = adminConfigFormat{}

func (adminConfigFormat) Marshal(c adminconf.Config) []byte {
	return client.AdminConfig(c).Marshal()
}

func (adminConfigFormat) Read(path string) (adminconf.Config, error) {
	c, err := client.ReadAdminConfig(path)
	return adminconf.Config(c), err
}
