package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// SnapshotMagic starts every store snapshot (Store.Snapshot). After it
// come records — a key's length and a value's length as uvarints, then
// the key and the value — and an end record: a zero key length followed
// by the number of records as a uvarint. The format names no engine: a
// store on another engine can write and read the same records.
const SnapshotMagic = "fleet-store-snapshot v1\n"

// Restore-related keys (see RestoreSnapshot).
const (
	// RestoreHoldPrefix marks, per device, a desired state restored from
	// a backup and not yet published: v1/restore-hold/{device}. The
	// controller publishes nothing to the device until it reported the
	// generation it runs, and then continues above it.
	RestoreHoldPrefix = "v1/restore-hold/"
	// keyRestoredFrom records the backup a store was restored from.
	keyRestoredFrom = "v1/meta/restored-from"
)

// RestoreHoldKey is the hold of a restored device's desired state.
func RestoreHoldKey(device string) string { return RestoreHoldPrefix + device }

// SnapshotInfo describes a snapshot written by Store.Snapshot.
type SnapshotInfo struct {
	// Revision is the store revision the snapshot holds, exactly: every
	// write committed at or below it, none above.
	Revision uint64 `json:"revision"`
	// StoreID is the store's ID (v1/meta/store-id).
	StoreID string `json:"storeID"`
	// Keys is the number of records.
	Keys int `json:"keys"`
	// Objects counts the objects per resource ("devices": 3, …).
	Objects map[string]int `json:"objects"`
	// Bytes is the size of the snapshot stream.
	Bytes int64 `json:"bytes"`
}

// Snapshot writes every key of the store, as of one revision, to w,
// while the store keeps serving reads and writes: it reads one engine
// read transaction, whose snapshot is a single committed revision on
// Badger and on etcd alike (Badger's own DB.Backup streams with one
// transaction per goroutine, so writes committed during it could land in
// part).
func (s *Store) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	info := SnapshotInfo{StoreID: s.id, Objects: map[string]int{}}
	if err := s.acquire(ctx); err != nil {
		return info, err
	}
	defer s.release()
	b, err := s.eng.begin(ctx, false)
	if err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	defer b.discard()
	rev, err := readRevision(b)
	if err != nil {
		return info, fmt.Errorf("snapshot: read revision: %w", err)
	}
	info.Revision = rev
	cw := &countWriter{w: bufio.NewWriterSize(w, 64<<10)}
	if _, err := io.WriteString(cw, SnapshotMagic); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	err = b.scan("", false, func(key string, val []byte) error {
		if info.Keys%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err := writeRecord(cw, []byte(key), val); err != nil {
			return err
		}
		info.Keys++
		if res, ok := objectResource(key); ok {
			info.Objects[res]++
		}
		return nil
	})
	if err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	var end [2 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(end[:], 0)
	n += binary.PutUvarint(end[n:], uint64(info.Keys))
	if _, err := cw.Write(end[:n]); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	if err := cw.w.(*bufio.Writer).Flush(); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	info.Bytes = cw.n
	return info, nil
}

// RestoreOptions configure RestoreSnapshot.
type RestoreOptions struct {
	// Dir is the new store's directory: it must not exist or be empty.
	Dir string
	// From names the backup, recorded in the store (v1/meta/restored-from).
	From string
}

// RestoreSnapshot creates a store in o.Dir from a snapshot Store.Snapshot
// wrote, and returns what it held. It refuses a directory that holds
// anything. The restored store keeps the snapshot's revision and store
// ID; two things differ on purpose:
//   - the devices' last statuses (v1/status/) are left out: they are as
//     old as the backup, and each device reports its own again;
//   - every device with a desired state gets a hold (RestoreHoldKey): the
//     device may have applied generations the backup does not know, so
//     the controller waits for its report before it publishes, and then
//     continues above the generation it reported (hub/controller).
func RestoreSnapshot(ctx context.Context, o RestoreOptions, r io.Reader) (SnapshotInfo, error) {
	info := SnapshotInfo{Objects: map[string]int{}}
	if err := requireEmptyDir(o.Dir); err != nil {
		return info, err
	}
	db, err := badger.Open(badgerOptions(o.Dir, slog.New(slog.DiscardHandler)).WithSyncWrites(false))
	if err != nil {
		return info, fmt.Errorf("restore: open %s: %w", o.Dir, err)
	}
	wb := db.NewWriteBatch()
	err = readSnapshot(ctx, r, func(key, val []byte) error {
		k := string(key)
		info.Keys++
		if res, ok := objectResource(k); ok {
			info.Objects[res]++
		}
		switch {
		case k == keyRevision && len(val) == 8:
			info.Revision = binary.BigEndian.Uint64(val)
		case k == keyStoreID:
			info.StoreID = string(val)
		case strings.HasPrefix(k, prefixStatus):
			return nil
		case strings.HasPrefix(k, prefixDesired):
			if err := wb.Set([]byte(RestoreHoldKey(k[len(prefixDesired):])), []byte("1")); err != nil {
				return err
			}
		}
		return wb.Set(bytes.Clone(key), bytes.Clone(val))
	})
	if err == nil {
		err = wb.Set([]byte(keyRestoredFrom), []byte(o.From))
	}
	if err == nil {
		err = wb.Flush()
	} else {
		wb.Cancel()
	}
	if err == nil && (info.StoreID == "" || info.Revision == 0 && info.Keys > 0) {
		err = errors.New("the snapshot has no store ID or revision: not a Fleet store")
	}
	if err == nil {
		err = db.Sync()
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return info, fmt.Errorf("restore store: %w", err)
	}
	return info, nil
}

// RestoredFrom returns what the store was restored from ("" if it never
// was).
func (s *Store) RestoredFrom(ctx context.Context) (string, error) {
	var from string
	err := s.View(ctx, func(t *Txn) error {
		v, err := t.Get(keyRestoredFrom)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		from = string(v)
		return err
	})
	return from, err
}

// RestoreHolds counts the devices still under a restore hold.
func (s *Store) RestoreHolds(ctx context.Context) (int, error) {
	n := 0
	err := s.View(ctx, func(t *Txn) error {
		return t.Scan(RestoreHoldPrefix, func(string, []byte) error { n++; return nil })
	})
	return n, err
}

// readSnapshot checks the magic and hands every record to fn; the end
// record's count must match.
func readSnapshot(ctx context.Context, r io.Reader, fn func(key, val []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(SnapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != SnapshotMagic {
		return errors.New("not a Fleet store snapshot (bad header)")
	}
	var n uint64
	var key, val []byte
	for {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		klen, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("snapshot truncated after %d records: %w", n, err)
		}
		if klen == 0 {
			count, err := binary.ReadUvarint(br)
			if err != nil || count != n {
				return fmt.Errorf("snapshot end record says %d records, read %d", count, n)
			}
			return nil
		}
		vlen, err := binary.ReadUvarint(br)
		if err != nil || klen > 1<<16 || vlen > 1<<30 {
			return fmt.Errorf("snapshot record %d: bad lengths", n)
		}
		key, val = grow(key, klen), grow(val, vlen)
		if _, err := io.ReadFull(br, key); err != nil {
			return fmt.Errorf("snapshot record %d: %w", n, err)
		}
		if _, err := io.ReadFull(br, val); err != nil {
			return fmt.Errorf("snapshot record %d: %w", n, err)
		}
		if err := fn(key, val); err != nil {
			return err
		}
		n++
	}
}

func grow(b []byte, n uint64) []byte {
	if uint64(cap(b)) < n {
		return make([]byte, n)
	}
	return b[:n]
}

func writeRecord(w io.Writer, key, val []byte) error {
	var hdr [2 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(key)))
	n += binary.PutUvarint(hdr[n:], uint64(len(val)))
	if _, err := w.Write(hdr[:n]); err != nil {
		return err
	}
	if _, err := w.Write(key); err != nil {
		return err
	}
	_, err := w.Write(val)
	return err
}

// objectResource returns the resource of an object key.
func objectResource(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefixObjects)
	if !ok {
		return "", false
	}
	res, _, ok := strings.Cut(rest, "/")
	return res, ok
}

// requireEmptyDir accepts a directory that does not exist or is empty.
func requireEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("restore: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("restore: %s is not empty (%d entries): nothing was written", dir, len(entries))
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
