package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func secret(name, val string) *schema.Secret {
	return &schema.Secret{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: name},
		Data:     map[string][]byte{"v": []byte(val)},
	}
}

// atRest reports the first file under dirs that holds needle.
func atRest(t *testing.T, dirs []string, needle []byte) string {
	t.Helper()
	var found string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() || found != "" {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, needle) {
				found = p
			}
			return nil
		})
		if err != nil {
			t.Fatalf("read %s: %v", d, err)
		}
	}
	return found
}

func testSecretsAtRest(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	plain := fmt.Sprintf("p4ssw0rd-%d-at-rest", time.Now().UnixNano())
	if _, _, err := s.Apply(ctx, secret("creds", plain), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, secret("creds", plain+"-2"), false); err != nil {
		t.Fatal(err)
	}
	// What the API reads: keys and sizes only.
	got, err := s.Get(ctx, schema.KindSecret, "creds")
	if err != nil || got.(*schema.Secret).Data != nil {
		t.Fatalf("Get of a Secret: %+v, %v", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if f := atRest(t, b.AtRest, []byte(plain)); f != "" {
		t.Fatalf("the Secret's value is in clear in %s", f)
	}
	if f := atRest(t, b.AtRest, []byte("creds")); f == "" {
		t.Fatalf("the Secret's name is in none of %v: the check reads the wrong files", b.AtRest)
	}
}

func testTokensHashed(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	if _, err := s.Create(ctx, Device("d1"), false); err != nil {
		t.Fatal(err)
	}
	tok, err := s.IssueToken(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := s.IssueCredential(ctx, "ops", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if !s.VerifyToken("d1", tok) || s.VerifyToken("d1", tok+"x") {
		t.Fatal("token verification is wrong")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, secretVal := range []string{tok, cred} {
		if f := atRest(t, b.AtRest, []byte(secretVal)); f != "" {
			t.Fatalf("a token is in clear in %s", f)
		}
	}
}

func testConcurrentWriters(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	base, err := s.Create(ctx, Deployment("shared", "nginx:0"), false)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 6, 8
	var mu sync.Mutex
	revs := map[uint64]string{}
	var wins int
	var wg sync.WaitGroup
	errs := make(chan error, writers*each+writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				o, err := s.Create(ctx, Device(fmt.Sprintf("w%d-%d", w, i)), false)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if other, dup := revs[rv(t, o)]; dup {
					errs <- fmt.Errorf("%s and %s share resourceVersion %d", other, o.GetMetadata().Name, rv(t, o))
				}
				revs[rv(t, o)] = o.GetMetadata().Name
				mu.Unlock()
			}
			// Everyone updates from the same resourceVersion: one wins.
			d := Deployment("shared", fmt.Sprintf("nginx:%d", w+1))
			d.Metadata.ResourceVersion = base.GetMetadata().ResourceVersion
			_, err := s.Update(ctx, d, false)
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.Is(err, store.ErrConflict):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if wins != 1 {
		t.Fatalf("%d concurrent updates from one resourceVersion won, want 1", wins)
	}
	objs, _, err := s.List(ctx, schema.KindDevice, nil)
	if err != nil || len(objs) != writers*each {
		t.Fatalf("%d devices after concurrent creates, want %d (%v)", len(objs), writers*each, err)
	}
}

// testDisruption: a writer creates devices while part of the engine is
// killed; every create that was acknowledged is there afterwards, and
// after a reopen.
func testDisruption(t *testing.T, b Backend) {
	if b.Disrupt == nil {
		t.Log("one process: nothing to kill beside the store (reopen is ReopenKeepsEverything)")
		return
	}
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	var mu sync.Mutex
	var acked []string
	var failed int
	var maxPause time.Duration
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("d%05d", i)
			start := time.Now()
			_, err := s.Create(ctx, Device(name), false)
			took := time.Since(start)
			mu.Lock()
			maxPause = max(maxPause, took)
			if err == nil {
				acked = append(acked, name)
			} else {
				failed++
			}
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitFor := func(n int) {
		t.Helper()
		for count() < n {
			if ctx.Err() != nil {
				t.Fatalf("writes stopped at %d acknowledged, want %d", count(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(30)
	// Twice: Disrupt may take a different part each time (etcd: a
	// follower, then the leader).
	for range 2 {
		restore := b.Disrupt(t)
		waitFor(count() + 50)
		restore()
		waitFor(count() + 20)
	}
	close(stop)
	<-done
	mu.Lock()
	names := slices.Clone(acked)
	mu.Unlock()
	t.Logf("%d creates acknowledged, %d failed, longest create %v", len(names), failed, maxPause)
	check := func(s *store.Store) {
		t.Helper()
		for _, n := range names {
			if _, err := s.Get(ctx, schema.KindDevice, n); err != nil {
				t.Fatalf("acknowledged device %s: %v", n, err)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(open(t, b, store.Options{}))
}
