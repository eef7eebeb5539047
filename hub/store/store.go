package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Store. Only Dir (or Etcd) is required.
type Options struct {
	// Dir is the Badger directory; it is created if missing.
	Dir string
	// Logger receives the store's and Badger's warnings and errors.
	Logger *slog.Logger
	// GCInterval is how often the value log is garbage collected; default
	// 5 minutes, negative disables it.
	GCInterval time.Duration
	// WatchRing is how many recent events Watch can replay; default 4096.
	WatchRing int
	// WatchQueue is how many undelivered events one watcher may hold before
	// it is dropped with ErrWatcherTooSlow; default 4096.
	WatchQueue int
	// Now is the clock for creationTimestamp; default time.Now.
	Now func() time.Time
	// PasswordHash, if set, computes a second hash of every token issued,
	// kept beside its SHA-256 (the hub passes Mosquitto's "$7$" hash, so
	// it can render an external broker's password file: Mosquitto cannot
	// use plain SHA-256).
	PasswordHash func(token string) (string, error)
	// SecretKeyFile holds the key that encrypts the values of Secrets in
	// the store (see secrets.go): created, mode 0600, on the first open,
	// and required on every later one. Default: SecretKeyFileName
	// ("secrets.key") in the parent directory of Dir, which for the hub is
	// its data directory.
	SecretKeyFile string
	// AuditRetention is how long audit entries are kept (audit.go);
	// default DefaultAuditRetention, negative: forever.
	AuditRetention time.Duration
	// AuditMaxBytes bounds the audit trail's size (keys and values): the
	// oldest entries go first; default DefaultAuditMaxBytes, negative: no
	// bound.
	AuditMaxBytes int64
	// Etcd, if set, keeps the store in an etcd cluster (engine_etcd.go)
	// instead of Badger; Dir is then only where SecretKeyFile and the
	// fleet ID file default to (its parent directory).
	Etcd *EtcdOptions
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.GCInterval == 0 {
		o.GCInterval = 5 * time.Minute
	}
	if o.WatchRing <= 0 {
		o.WatchRing = 4096
	}
	if o.WatchQueue <= 0 {
		o.WatchQueue = 4096
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AuditRetention == 0 {
		o.AuditRetention = DefaultAuditRetention
	}
	if o.AuditMaxBytes == 0 {
		o.AuditMaxBytes = DefaultAuditMaxBytes
	}
	if o.SecretKeyFile == "" && o.Dir != "" {
		o.SecretKeyFile = filepath.Join(filepath.Dir(filepath.Clean(o.Dir)), SecretKeyFileName)
	}
	if o.Etcd != nil {
		e := *o.Etcd
		if e.Prefix == "" {
			e.Prefix = DefaultEtcdPrefix
		}
		if e.FleetIDFile == "" && o.SecretKeyFile != "" {
			e.FleetIDFile = filepath.Join(filepath.Dir(o.SecretKeyFile), FleetIDFileName)
		}
		o.Etcd = &e
	}
}

// Store is the hub's state, over Badger or etcd. It is safe for concurrent use.
type Store struct {
	eng engine
	log *slog.Logger
	id  string
	now func() time.Time

	// mu is held shared by every operation and exclusively by Close.
	mu     sync.RWMutex
	closed bool
	// writeMu serialises write transactions: revisions commit in order and
	// events are published in revision order.
	writeMu sync.Mutex
	// maxRev is the highest revision that may be visible to a reader; it is
	// raised before a commit.
	maxRev atomic.Uint64

	feed *feed
	auth *authCache
	// devUIDs: the uid of every Device, for Txn.DeviceUID; guarded by
	// writeMu.
	devUIDs deviceUIDs
	// passwordHash is Options.PasswordHash.
	passwordHash func(string) (string, error)
	// secretKey seals the values of Secrets (secrets.go).
	secretKey *secretKey
	// audit is the audit trail's position (audit.go).
	audit auditLog
	// follow, on etcd, feeds the watch ring and the auth cache from every
	// hub's commits (follow.go); nil on Badger.
	follow *follower
}

// openTimeout bounds each step of Open that reads or writes the engine.
const openTimeout = 30 * time.Second

// Open opens (or creates) the store: in Badger under opts.Dir, or, with
// opts.Etcd, in an etcd cluster under its prefix. Close it when done.
func Open(opts Options) (*Store, error) {
	opts.setDefaults()
	var eng engine
	var err error
	if opts.Etcd != nil {
		if opts.SecretKeyFile == "" {
			return nil, errors.New("open store: etcd: give Dir (the hub's data dir/store) or SecretKeyFile: the key that seals Secrets is a file of each hub")
		}
		eng, err = openEtcd(*opts.Etcd, opts.Logger)
	} else {
		if opts.Dir == "" {
			return nil, errors.New("open store: no directory")
		}
		eng, err = openBadger(opts.Dir, opts.GCInterval, opts.Logger)
	}
	if err != nil {
		return nil, err
	}
	s := &Store{
		eng:  eng,
		log:  opts.Logger,
		now:  opts.Now,
		auth: newAuthCache(),

		passwordHash: opts.PasswordHash,
		audit:        auditLog{retention: opts.AuditRetention, maxBytes: opts.AuditMaxBytes},
	}
	if err := s.load(opts); err != nil {
		return nil, errors.Join(err, eng.close())
	}
	return s, nil
}

// load checks the store's identity and key and builds the in-memory
// indexes.
func (s *Store) load(opts Options) error {
	var idFile, pinned string
	if opts.Etcd != nil {
		idFile = opts.Etcd.FleetIDFile
		var err error
		if pinned, err = readFleetID(idFile); err != nil {
			return err
		}
	}
	rev, err := s.bootstrap(pinned)
	if err != nil {
		return err
	}
	if pinned != "" && pinned != s.id {
		return pinFleetID(idFile, pinned, s.id, opts.Etcd.Prefix)
	}
	if err := s.openSecretKey(opts.SecretKeyFile); err != nil {
		return err
	}
	if opts.Etcd != nil {
		if err := pinFleetID(idFile, pinned, s.id, opts.Etcd.Prefix); err != nil {
			return err
		}
	}
	if w, ok := s.eng.(engineWatcher); ok {
		// Other hubs write here too: follow every commit (follow.go).
		return s.startFollower(w, opts.WatchRing, opts.WatchQueue)
	}
	s.maxRev.Store(rev)
	s.feed = newFeed(rev, opts.WatchRing, opts.WatchQueue)
	// The two indexes read different keys: side by side, a restarted hub
	// opens its broker to the fleet sooner (80 ms each at 10,000 devices).
	var authErr error
	var loading sync.WaitGroup
	loading.Go(func() { authErr = s.auth.load(s) })
	uidErr := s.loadDeviceUIDs()
	loading.Wait()
	return errors.Join(authErr, uidErr)
}

// bootstrap creates the store ID on first open and returns the revision.
// A hub pinned to a fleet (pinned, its ID) never creates a new store.
func (s *Store) bootstrap(pinned string) (uint64, error) {
	var rev uint64
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	err := engineUpdate(ctx, s.eng, func(txn engineTxn) error {
		v, ok, err := txn.get(keyStoreID)
		if err != nil {
			return err
		}
		if ok {
			s.id = string(v)
		} else {
			if err := checkEmpty(txn); err != nil {
				return err
			}
			if pinned != "" {
				return fmt.Errorf("the store is empty, but this hub belongs to fleet %s: check --etcd-prefix (or remove the hub's %s to start a new fleet): %w", pinned, FleetIDFileName, ErrForeignStore)
			}
			id, err := newUUID()
			if err != nil {
				return err
			}
			s.id = id
			if err := txn.set(keyStoreID, []byte(id)); err != nil {
				return err
			}
		}
		rev, err = readRevision(txn)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("open store: init: %w", err)
	}
	return rev, nil
}

// checkEmpty refuses to create a store where keys are already: an etcd
// prefix that holds something other than a Fleet store.
func checkEmpty(txn engineTxn) error {
	var found string
	errFound := errors.New("found")
	err := txn.scan("", false, func(key string, _ []byte) error {
		found = key
		return errFound
	})
	if errors.Is(err, errFound) {
		return fmt.Errorf("the store holds key %q but no %s: it is not a Fleet store (another application's data, or a prefix of another fleet?): %w", found, keyStoreID, ErrForeignStore)
	}
	return err
}

// openSecretKey loads (or, for a store that has none recorded, creates)
// the key that seals Secrets, and checks that it is the one the store's
// Secrets were sealed with.
func (s *Store) openSecretKey(path string) error {
	var recorded string
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	err := engineView(ctx, s.eng, func(txn engineTxn) error {
		v, _, err := txn.get(keySecretKeyID)
		recorded = string(v)
		return err
	})
	if err != nil {
		return fmt.Errorf("open store: read secret key id: %w", err)
	}
	key, err := loadSecretKey(path, recorded == "", s.log)
	if err != nil {
		if recorded != "" {
			return fmt.Errorf("open store: the store's Secrets are encrypted with key %s, kept in %s: restore that file (or, for another hub of the fleet, copy it from the first hub): %w", recorded, path, err)
		}
		return fmt.Errorf("open store: %w", err)
	}
	switch recorded {
	case key.id:
	case "":
		err := engineUpdate(ctx, s.eng, func(txn engineTxn) error {
			// Another hub may have recorded its key meanwhile.
			v, ok, err := txn.get(keySecretKeyID)
			if err != nil {
				return err
			}
			if ok && string(v) != key.id {
				return fmt.Errorf("%s holds key %s, but the store's Secrets are encrypted with key %s (recorded by another hub): give every hub the same file: %w", path, key.id, v, ErrSecretKey)
			}
			return txn.set(keySecretKeyID, []byte(key.id))
		})
		if err != nil {
			return fmt.Errorf("open store: record secret key id: %w", err)
		}
	default:
		return fmt.Errorf("open store: %s holds key %s, but the store's Secrets are encrypted with key %s: restore its file (every hub of a fleet needs the same one): %w", path, key.id, recorded, ErrSecretKey)
	}
	s.secretKey = key
	return nil
}

// Close stops the garbage collector, ends every watch and closes Badger.
// It waits for operations in flight.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.follow != nil {
		s.follow.stop()
	}
	s.feed.close()
	return s.eng.close()
}

// ID is the store's random identity, created on first open. It goes into
// every DesiredState so agents can tell a new store from an old one.
func (s *Store) ID() string { return s.id }

// Revision returns the store's current revision.
func (s *Store) Revision(ctx context.Context) (uint64, error) {
	var rev uint64
	err := s.View(ctx, func(t *Txn) error {
		rev = t.Revision()
		return nil
	})
	return rev, err
}

// acquire takes the shared lock for one operation.
func (s *Store) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) release() { s.mu.RUnlock() }

func readRevision(txn engineTxn) (uint64, error) {
	v, ok, err := txn.get(keyRevision)
	if err != nil || !ok {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("revision key holds %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func encodeRevision(rev uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, rev)
}

// newUUID returns a random (version 4) UUID.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random uuid: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
