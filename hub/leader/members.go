package leader

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetmq/fleet/schema"
)

// Members lists the hubs registered under prefix, the leader first, each
// with its lease's TTL and what remains of it.
func Members(ctx context.Context, cli *clientv3.Client, prefix string) (schema.HubMemberList, error) {
	list := schema.HubMemberList{Store: "etcd", Items: []schema.HubMember{}}
	resp, err := cli.Get(ctx, MembersPrefix(prefix), clientv3.WithPrefix())
	if err != nil {
		return list, fmt.Errorf("list hubs: %w", err)
	}
	lead, err := cli.Get(ctx, ElectionPrefix(prefix), clientv3.WithFirstCreate()...)
	if err != nil {
		return list, fmt.Errorf("read the leader: %w", err)
	}
	if len(lead.Kvs) > 0 {
		list.Leader = string(lead.Kvs[0].Value)
	}
	for _, kv := range resp.Kvs {
		var m schema.HubMember
		if err := json.Unmarshal(kv.Value, &m); err != nil || m.ID == "" {
			// Not a registration a hub of this version wrote: show the key.
			m = schema.HubMember{ID: strings.TrimPrefix(string(kv.Key), MembersPrefix(prefix))}
		}
		m.Leader = m.ID == list.Leader && list.Leader != ""
		m.Lease = strconv.FormatInt(kv.Lease, 16)
		m.LeaseRemainingSeconds = -1
		if kv.Lease != 0 {
			if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
				m.LeaseTTLSeconds, m.LeaseRemainingSeconds = ttl.GrantedTTL, ttl.TTL
			}
		}
		list.Items = append(list.Items, m)
	}
	slices.SortStableFunc(list.Items, func(a, b schema.HubMember) int {
		if a.Leader != b.Leader {
			if a.Leader {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return list, nil
}
