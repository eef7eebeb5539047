package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestSnapshotIsOneRevisionUnderWrites takes a snapshot while writes run
// and checks the restored store holds exactly the writes at or below the
// snapshot's revision, each object at its resourceVersion, none above.
func TestSnapshotIsOneRevisionUnderWrites(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	s := openTest(t, Options{Dir: filepath.Join(root, "store")})
	type write struct {
		name string
		rev  uint64
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("dep-%d-%d", w, i%7)
				obj, _, err := s.Apply(ctx, newDeployment(name, "img:"+strconv.Itoa(i)), false)
				if err != nil {
					t.Errorf("apply: %v", err)
					return
				}
				rv, _ := strconv.ParseUint(obj.GetMetadata().ResourceVersion, 10, 64)
				mu.Lock()
				writes = append(writes, write{name, rv})
				mu.Unlock()
			}
		})
	}
	// Let some writes land before and during the snapshot.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(writes) > 50 })
	if _, err := s.Write(ctx, func(tx *Txn) error { return tx.Set(DesiredKey("pi-1"), []byte(`{"generation":7}`)) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, func(tx *Txn) error { return tx.Set(prefixStatus+"pi-1", []byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	info, err := s.Snapshot(ctx, &buf)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return writes[len(writes)-1].rev > info.Revision+20 })
	close(stop)
	wg.Wait()
	if info.StoreID != s.ID() || info.Bytes != int64(buf.Len()) || info.Objects["deployments"] == 0 {
		t.Fatalf("snapshot info %+v (stream %d bytes)", info, buf.Len())
	}

	dst := filepath.Join(t.TempDir(), "data")
	got, err := RestoreSnapshot(ctx, RestoreOptions{Dir: filepath.Join(dst, "store"), From: "test.age"}, bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != info.Revision || got.StoreID != info.StoreID || got.Keys != info.Keys {
		t.Fatalf("restored %+v, snapshot %+v", got, info)
	}
	key, err := os.ReadFile(filepath.Join(root, SecretKeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, SecretKeyFileName), key, 0o600); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, Options{Dir: filepath.Join(dst, "store")})
	if r.ID() != s.ID() {
		t.Errorf("restored store ID %s, want %s", r.ID(), s.ID())
	}
	if rev, _ := r.Revision(ctx); rev != info.Revision {
		t.Errorf("restored revision %d, want %d", rev, info.Revision)
	}
	want := map[string]uint64{}
	for _, w := range writes {
		if w.rev <= info.Revision && w.rev > want[w.name] {
			want[w.name] = w.rev
		}
	}
	objs, _, err := r.List(ctx, schema.KindDeployment, nil)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]uint64{}
	for _, o := range objs {
		rv, _ := strconv.ParseUint(o.GetMetadata().ResourceVersion, 10, 64)
		have[o.GetMetadata().Name] = rv
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Errorf("restored objects (name:resourceVersion)\n%v\nwant (every write at or below %d)\n%v", have, info.Revision, want)
	}
	if n, err := r.RestoreHolds(ctx); n != 1 || err != nil {
		t.Errorf("RestoreHolds = %d, %v; want 1", n, err)
	}
	if from, _ := r.RestoredFrom(ctx); from != "test.age" {
		t.Errorf("RestoredFrom = %q", from)
	}
	err = r.View(ctx, func(tx *Txn) error {
		if _, err := tx.Get(RestoreHoldKey("pi-1")); err != nil {
			t.Errorf("no restore hold for pi-1: %v", err)
		}
		if _, err := tx.Get(prefixStatus + "pi-1"); err == nil {
			t.Error("the backup's stale status of pi-1 was restored")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRestoreSnapshotRefuses(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, Options{})
	var buf bytes.Buffer
	if _, err := s.Snapshot(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		data      []byte
		want      string
	}{
		{"non-empty dir", nonEmpty, full, "is not empty"},
		{"not a snapshot", "", []byte("hello world, this is not a snapshot"), "bad header"},
		{"cut short", "", full[:len(full)-3], "snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "store")
			}
			_, err := RestoreSnapshot(ctx, RestoreOptions{Dir: dir}, bytes.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(nonEmpty, "keep")); err != nil || string(b) != "x" {
		t.Errorf("the non-empty directory was touched: %q %v", b, err)
	}
}

// waitFor polls cond every millisecond, for at most 20 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20 s")
		}
		<-tick.C
	}
}
