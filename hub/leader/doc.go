// Package leader elects one leader among the hubs that share a fleet's
// store on etcd, and registers every hub so that `fleet get hubs` can list
// them.
//
// # The contract
//
//   - Every hub holds one etcd lease (Options.LeaseTTL, default 10 s; the
//     client renews it every third of the TTL). Its registration
//     (schema.HubMember, at {prefix}hubs/{id}) and, while it campaigns or
//     leads, its election key ({prefix}leader/{lease}) are bound to that
//     lease: a hub that dies disappears within the TTL, and its
//     leadership with it. Both live outside the store's v1/ keys, so
//     backups, migrations and the store's watch never carry them.
//   - The leader is the campaigner whose election key has the lowest
//     create revision (go.etcd.io/etcd/client/v3/concurrency). It runs
//     the function given to Elector.Run for one term; standbys wait.
//   - A term is fenced: Run's function gets a context carrying a
//     store.Fence (the election key and its create revision), and every
//     store commit made with that context compares the key in the same
//     etcd transaction. A deposed or partitioned leader cannot commit;
//     its commit fails with store.ErrNotLeader and the term ends at once.
//   - A term also ends, before the lease does, when the lease's renewals
//     stop arriving for two thirds of the TTL (a partition from etcd), or
//     when the session ends (lease revoked or expired). The function's
//     context is cancelled; it must stop publishing and writing.
//   - After a term Run returns ErrLostLeadership: a hub that lost its
//     leadership exits and is started again (systemd Restart=always) as a
//     standby with a fresh state, as Kubernetes' controller managers do.
//     A clean stop (ctx done) resigns, so a standby takes over at once
//     instead of after the TTL.
//
// On Badger there is one hub and no election: the hub is always the
// leader (hub/leader.go in package hub).
package leader
