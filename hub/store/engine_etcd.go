package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultEtcdPrefix is where a fleet's keys go in etcd when no prefix is
// given: "/fleet/v1/objects/…".
const DefaultEtcdPrefix = "/fleet/"

// FleetIDFileName is the file, beside the hub's secrets.key, that pins the
// hub to one fleet: the store ID it first opened on etcd.
const FleetIDFileName = "fleet-id"

// EtcdOptions put the store in an etcd cluster instead of Badger.
type EtcdOptions struct {
	// Endpoints are the members' client URLs (https:// with TLS) or
	// host:port.
	Endpoints []string
	// Prefix is put before every key, so one cluster holds several fleets;
	// default DefaultEtcdPrefix. It must not be empty.
	Prefix string
	// TLS, if set, is used for every connection (CA and client
	// certificate: see LoadEtcdTLS).
	TLS *tls.Config
	// DialTimeout bounds Open's first contact with a quorum; default 5 s.
	DialTimeout time.Duration
	// RequestTimeout bounds each read and commit; default 15 s.
	RequestTimeout time.Duration
	// FleetIDFile pins this hub to one fleet: Open writes the store ID
	// there the first time and refuses a prefix holding another store ID
	// afterwards. Default: FleetIDFileName beside Options.SecretKeyFile;
	// "-" disables it.
	FleetIDFile string
}

// etcdPageSize is how many keys one range request of a scan reads.
const etcdPageSize = 512

// etcdMaxCompares bounds the compares of one commit (etcd refuses more
// operations than its --max-txn-ops, 128 by default).
const etcdMaxCompares = 100

// ParseStoreURL parses the hub's --store value: "badger" (or "") for the
// embedded store, or "etcd://h1:2379,h2:2379,h3:2379". It returns the etcd
// endpoints, nil for Badger; with tls they are https:// URLs.
func ParseStoreURL(s string, useTLS bool) ([]string, error) {
	if s == "" || s == "badger" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		return nil, fmt.Errorf("--store %q: want \"badger\" or etcd://host:port[,host:port…]", s)
	}
	rest = strings.TrimSuffix(rest, "/")
	scheme := "http://"
	if useTLS {
		scheme = "https://"
	}
	var eps []string
	for h := range strings.SplitSeq(rest, ",") {
		h = strings.TrimSpace(h)
		u, err := url.Parse("//" + h)
		if h == "" || err != nil || u.Host != h || u.Port() == "" {
			return nil, fmt.Errorf("--store %q: endpoint %q: want host:port", s, h)
		}
		eps = append(eps, scheme+h)
	}
	return eps, nil
}

// LoadEtcdTLS builds the TLS configuration for etcd from PEM files: the CA
// that signed the members' certificates and this hub's client certificate
// and key (both or neither).
func LoadEtcdTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cacert: %w", err)
		}
		cfg.RootCAs = x509Pool(pem)
		if cfg.RootCAs == nil {
			return nil, fmt.Errorf("--etcd-cacert %s: no PEM certificate in it", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// etcdEngine keeps the store's keys in etcd under a prefix. Reads of one
// transaction are at one etcd revision; a commit is one etcd transaction
// whose compares check that nothing it read changed since.
type etcdEngine struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
}

func openEtcd(o EtcdOptions, log *slog.Logger) (*etcdEngine, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("open store: etcd: no endpoints")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultEtcdPrefix
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 15 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            o.Endpoints,
		DialTimeout:          o.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  o.TLS,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("open store: etcd %s: %w", strings.Join(o.Endpoints, ","), err)
	}
	// A linearizable read needs a quorum: an unreachable cluster fails here,
	// in bounded time, before anything is written.
	ctx, cancel := context.WithTimeout(context.Background(), o.DialTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, o.Prefix+keyStoreID); err != nil {
		return nil, errors.Join(fmt.Errorf("open store: etcd %s: no quorum reachable within %s (members up? TLS, certificates right?): %w: %w",
			strings.Join(o.Endpoints, ","), o.DialTimeout, ErrUnavailable, err), cli.Close())
	}
	log.Info("store on etcd", "endpoints", strings.Join(o.Endpoints, ","), "prefix", o.Prefix)
	return &etcdEngine{cli: cli, prefix: o.Prefix, timeout: o.RequestTimeout}, nil
}

func (e *etcdEngine) kind() string { return "etcd" }

func (e *etcdEngine) close() error {
	if err := e.cli.Close(); err != nil {
		return fmt.Errorf("close etcd client: %w", err)
	}
	return nil
}

func (e *etcdEngine) begin(ctx context.Context, writable bool) (engineTxn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &etcdTxn{e: e, ctx: ctx, writable: writable}, nil
}

// etcdTxn reads at one etcd revision (the first read's) and buffers its
// writes.
type etcdTxn struct {
	e        *etcdEngine
	ctx      context.Context
	writable bool
	// rev is the snapshot's etcd revision; 0 until the first read.
	rev int64
	// reads: the mod revision (0: absent) of every key read from etcd.
	reads map[string]int64
	// scanned: prefixes read.
	scanned []string
	// writes: buffered values; nil: a delete. order: first-write order.
	writes map[string][]byte
	order  []string
}

// readOpts are the options of a read: the first is linearizable (a
// quorum confirms the revision), later ones read that revision from any
// member that has applied it (serializable: no quorum round).
func (t *etcdTxn) readOpts(extra ...clientv3.OpOption) []clientv3.OpOption {
	if t.rev > 0 {
		extra = append(extra, clientv3.WithRev(t.rev), clientv3.WithSerializable())
	}
	return extra
}

// rangeAt reads key (with opts) at the transaction's revision; a member
// that has not applied that revision yet is asked again, linearizably.
func (t *etcdTxn) rangeAt(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.e.timeout)
	defer cancel()
	resp, err := t.e.cli.Get(ctx, key, t.readOpts(opts...)...)
	if errors.Is(err, rpctypes.ErrFutureRev) {
		resp, err = t.e.cli.Get(ctx, key, append(opts, clientv3.WithRev(t.rev))...)
	}
	if err != nil {
		return nil, etcdErr(err)
	}
	t.noteRev(resp.Header.Revision)
	return resp, nil
}

func (t *etcdTxn) get(key string) ([]byte, bool, error) {
	if v, ok := t.writes[key]; ok {
		return slices.Clone(v), v != nil, nil
	}
	resp, err := t.rangeAt(t.e.prefix + key)
	if err != nil {
		return nil, false, err
	}
	var mod int64
	var val []byte
	if len(resp.Kvs) > 0 {
		mod, val = resp.Kvs[0].ModRevision, resp.Kvs[0].Value
	}
	if t.writable {
		if t.reads == nil {
			t.reads = map[string]int64{}
		}
		t.reads[key] = mod
	}
	return val, len(resp.Kvs) > 0, nil
}

func (t *etcdTxn) noteRev(rev int64) {
	if t.rev == 0 {
		t.rev = rev
	}
}

func (t *etcdTxn) scan(prefix string, reverse bool, fn func(key string, val []byte) error) error {
	if t.writable {
		t.scanned = append(t.scanned, prefix)
	}
	pending := false
	for k := range t.writes {
		if strings.HasPrefix(k, prefix) {
			pending = true
			break
		}
	}
	if pending {
		return t.scanMerged(prefix, reverse, fn)
	}
	return t.scanPages(prefix, reverse, fn)
}

func (t *etcdTxn) scanFrom(prefix, after string, fn func(key string, val []byte) error) error {
	if after == "" {
		return t.scan(prefix, false, fn)
	}
	if t.writable {
		// A write transaction's own writes are laid over etcd's keys by
		// scan; skip what comes before after there.
		start := prefix + after
		return t.scan(prefix, false, func(key string, val []byte) error {
			if key <= start {
				return nil
			}
			return fn(key, val)
		})
	}
	return t.scanRange(prefix, t.e.prefix+prefix+after+"\x00", false, fn)
}

// scanPages streams the keys under prefix from etcd, a page at a time, at
// the transaction's revision.
func (t *etcdTxn) scanPages(prefix string, reverse bool, fn func(key string, val []byte) error) error {
	return t.scanRange(prefix, t.e.prefix+prefix, reverse, fn)
}

// scanRange is scanPages from the etcd key from on (forward).
func (t *etcdTxn) scanRange(prefix, from string, reverse bool, fn func(key string, val []byte) error) error {
	end := clientv3.GetPrefixRangeEnd(t.e.prefix + prefix)
	order := clientv3.SortAscend
	if reverse {
		order = clientv3.SortDescend
	}
	for {
		resp, err := t.rangeAt(from, clientv3.WithRange(end), clientv3.WithLimit(etcdPageSize),
			clientv3.WithSort(clientv3.SortByKey, order))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if err := fn(strings.TrimPrefix(string(kv.Key), t.e.prefix), kv.Value); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if reverse {
			end = last
		} else {
			from = last + "\x00"
		}
	}
}

// scanMerged scans prefix with the transaction's own writes laid over
// what etcd holds.
func (t *etcdTxn) scanMerged(prefix string, reverse bool, fn func(key string, val []byte) error) error {
	merged := map[string][]byte{}
	err := t.scanPages(prefix, false, func(k string, v []byte) error {
		merged[k] = slices.Clone(v)
		return nil
	})
	if err != nil {
		return err
	}
	for k, v := range t.writes {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if v == nil {
			delete(merged, k)
		} else {
			merged[k] = v
		}
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if reverse {
		slices.Reverse(keys)
	}
	for _, k := range keys {
		if err := fn(k, merged[k]); err != nil {
			return err
		}
	}
	return nil
}

func (t *etcdTxn) set(key string, val []byte) error {
	if !t.writable {
		return errors.New("write in a read-only transaction")
	}
	t.buffer(key, slices.Clone(val))
	if t.writes[key] == nil {
		t.writes[key] = []byte{}
	}
	return nil
}

func (t *etcdTxn) del(key string) error {
	if !t.writable {
		return errors.New("write in a read-only transaction")
	}
	t.buffer(key, nil)
	return nil
}

func (t *etcdTxn) buffer(key string, val []byte) {
	if t.writes == nil {
		t.writes = map[string][]byte{}
	}
	if _, ok := t.writes[key]; !ok {
		t.order = append(t.order, key)
	}
	t.writes[key] = val
}

// compares are the conditions of the commit: every key read still at the
// mod revision it was read at, and no key under a scanned prefix changed
// after the snapshot. Past etcdMaxCompares, the store revision key (every
// store write changes it) and the prefixes are kept.
func (t *etcdTxn) compares() []clientv3.Cmp {
	// No commit since the snapshot: every commit writes keyCommitID, and
	// resolve fences a commit whose answer was lost by writing it too.
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(t.e.prefix+keyCommitID), "<", t.rev+1)}
	if mod, ok := t.reads[keyRevision]; ok {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.e.prefix+keyRevision), "=", mod))
	}
	if t.rev > 0 {
		for _, p := range slices.Compact(slices.Sorted(slices.Values(t.scanned))) {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.e.prefix+p), "<", t.rev+1).WithPrefix())
		}
	}
	keys := make([]string, 0, len(t.reads))
	for k := range t.reads {
		if k != keyRevision {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if len(cmps) >= etcdMaxCompares {
			break
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.e.prefix+k), "=", t.reads[k]))
	}
	return cmps
}

// commit sends one etcd transaction. It is not cut short by the caller's
// context (only by RequestTimeout): a commit whose outcome is unknown
// would leave the store's in-memory feed behind etcd.
func (t *etcdTxn) commit(ctx context.Context) (uint64, error) {
	if len(t.order) == 0 {
		return uint64(t.rev), nil
	}
	ops := make([]clientv3.Op, 0, len(t.order))
	for _, k := range t.order {
		if v := t.writes[k]; v != nil {
			ops = append(ops, clientv3.OpPut(t.e.prefix+k, string(v)))
		} else {
			ops = append(ops, clientv3.OpDelete(t.e.prefix+k))
		}
	}
	if t.rev == 0 {
		// A blind write: take a snapshot revision for the fence compare.
		if _, err := t.rangeAt(t.e.prefix + keyCommitID); err != nil {
			return 0, err
		}
	}
	id, err := newUUID()
	if err != nil {
		return 0, err
	}
	ops = append(ops, clientv3.OpPut(t.e.prefix+keyCommitID, id))
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.e.timeout)
	defer cancel()
	// fence.go: a leader's commit also compares its election key.
	resp, err := t.e.cli.Txn(cctx).If(append(t.compares(), fenceCompares(ctx)...)...).Then(ops...).Commit()
	if err != nil {
		if definite(err) {
			return 0, fmt.Errorf("etcd commit of %d keys: %w", len(ops), etcdErr(err))
		}
		// Sent, outcome unknown (a leader change, a timeout): find out,
		// with a fresh deadline (cctx may be what ran out).
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*t.e.timeout)
		defer rcancel()
		rev, rerr := t.e.resolve(rctx, id)
		if rerr != nil {
			return 0, fmt.Errorf("etcd commit of %d keys: outcome unknown: %w (resolving it: %w)", len(ops), err, rerr)
		}
		if rev == 0 {
			return 0, fmt.Errorf("%w: etcd commit not applied: %w", errTxnConflict, err)
		}
		return rev, nil
	}
	if !resp.Succeeded {
		if err := t.e.fenceHeld(ctx); err != nil {
			return 0, err
		}
		return 0, errTxnConflict
	}
	t.order, t.writes = nil, nil
	return uint64(resp.Header.Revision), nil
}

// resolve settles a commit whose answer was lost: if keyCommitID holds
// its id, it applied (its etcd revision is returned); otherwise resolve
// writes a fence to keyCommitID, so the lost commit, should it still be on
// its way, fails its compare and never applies, and returns 0. Either way
// the outcome is final.
func (e *etcdEngine) resolve(ctx context.Context, id string) (uint64, error) {
	key := e.prefix + keyCommitID
	for {
		fence, err := newUUID()
		if err != nil {
			return 0, err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := e.cli.Txn(rctx).If(clientv3.Compare(clientv3.Value(key), "=", id)).
			Then(clientv3.OpGet(key)).Else(clientv3.OpPut(key, "fence-"+fence)).Commit()
		cancel()
		if err == nil {
			if !resp.Succeeded {
				return 0, nil
			}
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				return uint64(kvs[0].ModRevision), nil
			}
			return uint64(resp.Header.Revision), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// definite reports whether etcd refused a request outright (it was not
// applied): a limit or a bad request, not a timeout or a lost leader.
func definite(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrKeyNotFound)
}

func (t *etcdTxn) discard() {}

// etcdErr maps etcd's limits to ErrTooLarge and a compacted snapshot to a
// conflict (a write transaction runs again on a new one).
func etcdErr(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%w: more keys than the etcd members' --max-txn-ops allows (run them with --max-txn-ops=10000): %w", ErrTooLarge, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%w: larger than the etcd members' --max-request-bytes: %w", ErrTooLarge, err)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: snapshot compacted: %w", errTxnConflict, err)
	}
	return err
}

// readFleetID returns the fleet ID this hub is pinned to ("" if none).
func readFleetID(path string) (string, error) {
	if path == "" || path == "-" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open store: read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// pinFleetID refuses a store whose ID is not the one this hub is pinned
// to, and pins a hub that is not pinned yet.
func pinFleetID(path, pinned, id, prefix string) error {
	if path == "" || path == "-" {
		return nil
	}
	if pinned != "" && pinned != id {
		return fmt.Errorf("open store: etcd prefix %q holds fleet %s, but this hub belongs to fleet %s (recorded in %s): check --etcd-prefix: %w", prefix, id, pinned, path, ErrForeignStore)
	}
	if pinned == id {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("open store: pin fleet id: %w", err)
	}
	return nil
}

// x509Pool is a pool of the PEM certificates, nil if there are none.
func x509Pool(pem []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil
	}
	return pool
}

// engineChange is one key's change seen by an engine watch.
type engineChange struct {
	Key     string
	Value   []byte
	Deleted bool
	// Prev is the key's value before the change; HadPrev: it existed.
	Prev    []byte
	HadPrev bool
}

// engineBatch is every change of one engine revision (one commit), in the
// order the commit wrote them; a batch without changes only says that
// nothing under the prefix changed up to Rev.
type engineBatch struct {
	// Rev is the engine's revision of the commit (etcd's).
	Rev     uint64
	Changes []engineChange
	// Err ends the watch: ErrExpired when fromRev was compacted away.
	Err error
}

// engineWatcher is what an engine that other processes write to (etcd)
// offers: every commit under a prefix after one of its revisions, in
// order, exactly once, each whole. (Badger has one writer, this process,
// whose feed is txn.go's.)
type engineWatcher interface {
	watch(ctx context.Context, prefix string, fromRev uint64) <-chan engineBatch
}

var _ engineWatcher = (*etcdEngine)(nil)

// watch streams the commits under prefix after etcd revision fromRev
// (etcd never splits one revision's events over two watch responses). A
// revision etcd has compacted gives one batch with ErrExpired, like a
// store watch from a revision its ring no longer holds; the channel closes
// after an error or when ctx ends.
func (e *etcdEngine) watch(ctx context.Context, prefix string, fromRev uint64) <-chan engineBatch {
	out := make(chan engineBatch, 64)
	wch := e.cli.Watch(clientv3.WithRequireLeader(ctx), e.prefix+prefix, clientv3.WithPrefix(),
		clientv3.WithRev(int64(fromRev)+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	go func() {
		defer close(out)
		send := func(b engineBatch) bool {
			select {
			case out <- b:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for resp := range wch {
			if resp.CompactRevision > 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				send(engineBatch{Err: fmt.Errorf("watch from etcd revision %d: compacted up to %d: %w", fromRev, resp.CompactRevision, ErrExpired)})
				return
			}
			if err := resp.Err(); err != nil {
				send(engineBatch{Err: fmt.Errorf("etcd watch: %w", err)})
				return
			}
			if resp.IsProgressNotify() {
				// Nothing under the prefix up to this revision: a batch
				// without changes, so a watch resumed later starts here
				// (not from a revision compacted meanwhile).
				if !send(engineBatch{Rev: uint64(resp.Header.Revision)}) {
					return
				}
				continue
			}
			var b engineBatch
			for _, ev := range resp.Events {
				rev := uint64(ev.Kv.ModRevision)
				if rev != b.Rev && len(b.Changes) > 0 {
					if !send(b) {
						return
					}
					b = engineBatch{}
				}
				b.Rev = rev
				c := engineChange{Key: strings.TrimPrefix(string(ev.Kv.Key), e.prefix),
					Value: ev.Kv.Value, Deleted: ev.Type == clientv3.EventTypeDelete}
				if ev.PrevKv != nil {
					c.Prev, c.HadPrev = ev.PrevKv.Value, true
				}
				b.Changes = append(b.Changes, c)
			}
			if len(b.Changes) > 0 && !send(b) {
				return
			}
		}
	}()
	return out
}

// snapshotRev is the etcd revision the transaction reads at (0 before its
// first read).
func (t *etcdTxn) snapshotRev() uint64 { return uint64(t.rev) }

// lastCommitRev is the etcd revision of the last commit under the prefix
// as of the snapshot (every commit writes keyCommitID), 0 if none. It
// adds no compare: the commit's first compare already fails if any
// commit came after the snapshot.
func (t *etcdTxn) lastCommitRev() (uint64, error) {
	resp, err := t.rangeAt(t.e.prefix + keyCommitID)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return uint64(resp.Kvs[0].ModRevision), nil
}
