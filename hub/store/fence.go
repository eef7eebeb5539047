package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotLeader: a fenced commit (WithFence) found that its leadership is
// gone: the election key it names no longer exists with the create
// revision it had when this hub won. Nothing of the commit was written.
// The hub that gets it has been deposed and must stop writing as leader.
var ErrNotLeader = errors.New("not the leader")

// Fence is a leader's proof of leadership: its etcd election key (the
// full key, prefix included) and that key's create revision. A commit made
// under a Fence is one etcd transaction that also compares the key's
// create revision, so it applies only while the leadership it was made
// under still exists: a deposed or partitioned leader cannot write.
//
// On Badger (one hub, always the leader) a Fence changes nothing.
type Fence struct {
	Key string
	Rev int64
	// Lost, if set, is called (once per refused commit, from the
	// committing goroutine) with the ErrNotLeader error, so the leader
	// can stop at once.
	Lost func(error)
}

type fenceKey struct{}

// WithFence returns a context whose store writes are fenced by f: every
// commit made with it (Write, the object methods, WriteCache) fails with
// ErrNotLeader once f's election key is gone or was created again. The
// controller's context carries one; API writes do not (any hub takes
// them).
func WithFence(ctx context.Context, f *Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// fenceFrom returns the fence ctx carries, or nil.
func fenceFrom(ctx context.Context) *Fence {
	f, _ := ctx.Value(fenceKey{}).(*Fence)
	return f
}

// fenceCompares are the extra compares of a commit made with ctx: the
// election key still has the create revision it was won at.
func fenceCompares(ctx context.Context) []clientv3.Cmp {
	f := fenceFrom(ctx)
	if f == nil {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev)}
}

// fenceHeld tells, after a commit's compares failed, whether the fence is
// what failed: nil if ctx carries no fence or the fence still holds (the
// failure was an ordinary conflict), an ErrNotLeader error otherwise.
func (e *etcdEngine) fenceHeld(ctx context.Context) error {
	f := fenceFrom(ctx)
	if f == nil {
		return nil
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.timeout)
	defer cancel()
	resp, err := e.cli.Get(gctx, f.Key)
	if err != nil {
		return fmt.Errorf("check leadership (%s): %w", f.Key, err)
	}
	if len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == f.Rev {
		return nil
	}
	err = fmt.Errorf("fenced commit refused: election key %s (created at revision %d) is gone: %w", f.Key, f.Rev, ErrNotLeader)
	if f.Lost != nil {
		f.Lost(err)
	}
	return err
}

// EtcdClient returns the etcd client and key prefix of a store on etcd,
// for the parts of a hub that share its cluster (hub/leader: the election
// and the hubs' registrations); ok is false on Badger.
func (s *Store) EtcdClient() (cli *clientv3.Client, prefix string, ok bool) {
	e, ok := s.eng.(*etcdEngine)
	if !ok {
		return nil, "", false
	}
	return e.cli, e.prefix, true
}

// EtcdRequestTimeout is how long one etcd request of the store may take
// (EtcdOptions.RequestTimeout); 0 on Badger.
func (s *Store) EtcdRequestTimeout() time.Duration {
	if e, ok := s.eng.(*etcdEngine); ok {
		return e.timeout
	}
	return 0
}
