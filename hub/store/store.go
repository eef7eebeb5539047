package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Options configure a Store. Only Dir is required.
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
}

// Store is the hub's Badger-backed state. It is safe for concurrent use.
type Store struct {
	db  *badger.DB
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

	gcStop chan struct{}
	gcDone chan struct{}
}

// badgerOptions keeps Badger small: about 11 MB of RSS instead of hundreds,
// and every acknowledged write on disk.
func badgerOptions(dir string, log *slog.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithValueLogFileSize(16 << 20).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(0).
		WithCompression(options.None).
		WithNumVersionsToKeep(1).
		// Must stay within 15 % of MemTableSize (1.2 MB here).
		WithValueThreshold(1 << 20).
		WithNumCompactors(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithLogger(badgerLogger{log.With("component", "badger")})
}

// Open opens (or creates) the store in opts.Dir and starts its value-log
// garbage collector. Close it when done.
func Open(opts Options) (*Store, error) {
	opts.setDefaults()
	if opts.Dir == "" {
		return nil, errors.New("open store: no directory")
	}
	db, err := badger.Open(badgerOptions(opts.Dir, opts.Logger))
	if err != nil {
		if strings.Contains(err.Error(), "directory lock") {
			return nil, fmt.Errorf("open store %s: another process (a running fleet-hub?) holds it: %w: %w", opts.Dir, ErrLocked, err)
		}
		return nil, fmt.Errorf("open store %s: %w", opts.Dir, err)
	}
	s := &Store{
		db:     db,
		log:    opts.Logger,
		now:    opts.Now,
		auth:   newAuthCache(),
		gcStop: make(chan struct{}),

		passwordHash: opts.PasswordHash,
		gcDone:       make(chan struct{}),
		audit:        auditLog{retention: opts.AuditRetention, maxBytes: opts.AuditMaxBytes},
	}
	rev, err := s.bootstrap()
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := s.openSecretKey(opts.SecretKeyFile); err != nil {
		return nil, errors.Join(err, db.Close())
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
	if err := errors.Join(authErr, uidErr); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if opts.GCInterval > 0 {
		go s.gcLoop(opts.GCInterval)
	} else {
		close(s.gcDone)
	}
	return s, nil
}

// bootstrap creates the store ID on first open and returns the revision.
func (s *Store) bootstrap() (uint64, error) {
	var rev uint64
	err := s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keyStoreID))
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			id, err := newUUID()
			if err != nil {
				return err
			}
			s.id = id
			if err := txn.Set([]byte(keyStoreID), []byte(id)); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			s.id = string(v)
		}
		rev, err = readRevision(txn)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("open store: init: %w", err)
	}
	return rev, nil
}

// openSecretKey loads (or, for a store that has none recorded, creates)
// the key that seals Secrets, and checks that it is the one the store's
// Secrets were sealed with.
func (s *Store) openSecretKey(path string) error {
	var recorded string
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keySecretKeyID))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		recorded = string(v)
		return err
	})
	if err != nil {
		return fmt.Errorf("open store: read secret key id: %w", err)
	}
	key, err := loadSecretKey(path, recorded == "", s.log)
	if err != nil {
		if recorded != "" {
			return fmt.Errorf("open store: the store's Secrets are encrypted with key %s, kept in %s: restore that file: %w", recorded, path, err)
		}
		return fmt.Errorf("open store: %w", err)
	}
	switch recorded {
	case key.id:
	case "":
		err := s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keySecretKeyID), []byte(key.id)) })
		if err != nil {
			return fmt.Errorf("open store: record secret key id: %w", err)
		}
	default:
		return fmt.Errorf("open store: %s holds key %s, but the store's Secrets are encrypted with key %s: restore its file: %w", path, key.id, recorded, ErrSecretKey)
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
	close(s.gcStop)
	<-s.gcDone
	s.feed.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
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

func (s *Store) gcLoop(interval time.Duration) {
	defer close(s.gcDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.gcStop:
			return
		case <-t.C:
		}
		// Each successful run rewrites one value-log file; stop when there
		// is nothing left worth rewriting.
		for range 16 {
			err := s.db.RunValueLogGC(0.5)
			if err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
					s.log.Warn("value log gc failed", "err", err)
				}
				break
			}
		}
	}
}

func readRevision(txn *badger.Txn) (uint64, error) {
	item, err := txn.Get([]byte(keyRevision))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var rev uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("revision key holds %d bytes, want 8", len(v))
		}
		rev = binary.BigEndian.Uint64(v)
		return nil
	})
	return rev, err
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

// badgerLogger routes Badger's warnings and errors to slog and drops its
// informational chatter.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
