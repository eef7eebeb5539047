package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmq/fleet/hub/store"
)

// EtcdFlags are the etcd connection flags of a command that names an
// etcd store by URL (fleet-hub migrate).
type EtcdFlags struct {
	Prefix                        string
	CACertFile, CertFile, KeyFile string
}

// MigrateStore copies the stopped store at from into the empty store at
// to (`fleet-hub migrate`). Each is "badger:DIR" (DIR a hub's data dir,
// whose store/ is used, or a Badger directory itself) or
// "etcd://h1:2379,…" (with the etcd flags). It returns what was copied and
// a description of both ends.
func MigrateStore(ctx context.Context, from, to string, ef EtcdFlags, progress func(keys int)) (store.MigrateResult, string, string, error) {
	src, srcDesc, err := storeLocation("--from", from, ef, true)
	if err != nil {
		return store.MigrateResult{}, "", "", err
	}
	dst, dstDesc, err := storeLocation("--to", to, ef, false)
	if err != nil {
		return store.MigrateResult{}, "", "", err
	}
	if srcDesc == dstDesc {
		return store.MigrateResult{}, "", "", fmt.Errorf("--from and --to are the same store (%s)", srcDesc)
	}
	res, err := store.Migrate(ctx, src, dst, progress)
	return res, srcDesc, dstDesc, err
}

// CheckStoreEmpty checks that the store at to ("badger:DIR" or
// "etcd://…", as MigrateStore takes it) holds nothing, as a migration's or
// a restore's destination must; flag names the option in errors. It
// returns the store's description.
func CheckStoreEmpty(ctx context.Context, flag, to string, ef EtcdFlags) (string, error) {
	dst, desc, err := storeLocation(flag, to, ef, false)
	if err != nil {
		return "", err
	}
	if err := store.CheckEmpty(ctx, dst); err != nil {
		return desc, fmt.Errorf("%s %s: %w", flag, desc, err)
	}
	return desc, nil
}

// storeLocation reads one end of a migration.
func storeLocation(flag, v string, ef EtcdFlags, source bool) (store.Options, string, error) {
	if dir, ok := strings.CutPrefix(v, "badger:"); ok {
		if dir == "" {
			return store.Options{}, "", fmt.Errorf("%s %q: give the directory: badger:/var/lib/fleet-hub", flag, v)
		}
		dir = badgerDir(filepath.Clean(dir), source)
		return store.Options{Dir: dir, GCInterval: -1}, "badger:" + dir, nil
	}
	if !strings.HasPrefix(v, "etcd://") {
		return store.Options{}, "", fmt.Errorf("%s %q: want badger:DIR or etcd://HOST:PORT[,HOST:PORT…]", flag, v)
	}
	o := Options{Store: v, EtcdPrefix: ef.Prefix, EtcdCACertFile: ef.CACertFile, EtcdCertFile: ef.CertFile, EtcdKeyFile: ef.KeyFile}
	so, err := o.storeOptions(nil)
	if err != nil {
		return store.Options{}, "", fmt.Errorf("%s: %w", flag, err)
	}
	prefix := ef.Prefix
	if prefix == "" {
		prefix = store.DefaultEtcdPrefix
	}
	return store.Options{Etcd: so.Etcd}, v + " (prefix " + prefix + ")", nil
}

// badgerDir is the Badger directory of DIR: DIR itself if it holds a
// Badger database (or is named store), else DIR/store, the store of a
// hub's data dir.
func badgerDir(dir string, source bool) string {
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err == nil || filepath.Base(dir) == "store" {
		return dir
	}
	sub := filepath.Join(dir, "store")
	if _, err := os.Stat(sub); err == nil || !source {
		return sub
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return dir // Migrate names it missing
	}
	return sub
}
