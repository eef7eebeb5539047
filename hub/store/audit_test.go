package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func appendAudit(t *testing.T, s *Store, n int, actor string) {
	t.Helper()
	for i := range n {
		if _, err := s.AppendAudit(t.Context(), schema.AuditEntry{Actor: actor, Action: "create", Object: fmt.Sprintf("devices/d%d", i), Result: schema.AuditOK}); err != nil {
			t.Fatal(err)
		}
	}
}

func seqs(t *testing.T, s *Store, q AuditQuery) []uint64 {
	t.Helper()
	es, err := s.Audit(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func verify(t *testing.T, s *Store) schema.AuditVerification {
	t.Helper()
	v, err := s.VerifyAudit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAuditDurable: the trail and its numbering survive a reopen, the
// filters work, appends do not move the store revision, and the chain
// continues across the reopen.
func TestAuditDurable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.Revision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	appendAudit(t, s, 12, "admin")
	if now, _ := s.Revision(t.Context()); now != rev {
		t.Errorf("audit appends moved the revision from %d to %d", rev, now)
	}
	if got := fmt.Sprint(seqs(t, s, AuditQuery{Limit: 2})); got != "[11 12]" {
		t.Errorf("limit 2: %s", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendAudit(t, s, 1, "viewer")
	if got := fmt.Sprint(seqs(t, s, AuditQuery{Actor: "viewer"})); got != "[13]" {
		t.Errorf("actor viewer: %s", got)
	}
	es, err := s.Audit(t.Context(), AuditQuery{Actor: "viewer"})
	if err != nil || es[0].Time.IsZero() || es[0].Object != "devices/d0" {
		t.Fatalf("entry: %+v %v", es, err)
	}
	if got := fmt.Sprint(seqs(t, s, AuditQuery{Since: es[0].Time})); got != "[13]" {
		t.Errorf("since the newest: %s", got)
	}
	if v := verify(t, s); !v.OK || v.Entries != 13 || v.FirstSeq != 1 || v.LastSeq != 13 || v.Head != es[0].Hash || v.Anchor.Seq != 0 {
		t.Errorf("verify after a reopen: %+v", v)
	}
}

// TestAuditChain: each entry chains to the one before; an edited entry,
// an entry whose hash was recomputed after an edit, a removed entry, a
// removed newest entry and an edited anchor are each named by
// VerifyAudit.
func TestAuditChain(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendAudit(t, s, 6, "admin")
	es, err := s.Audit(t.Context(), AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		h, _ := AuditEntryHash(e)
		if e.Hash != h || len(h) != 64 || (i == 0 && e.Prev != "") || (i > 0 && e.Prev != es[i-1].Hash) {
			t.Fatalf("entry %d not chained: %+v", e.Seq, e)
		}
	}
	if v := verify(t, s); !v.OK || v.Entries != 6 || v.Head != es[5].Hash {
		t.Fatalf("intact: %+v", v)
	}
	raw := func(seq uint64) schema.AuditEntry {
		var e schema.AuditEntry
		_ = s.View(t.Context(), func(tx *Txn) error {
			v, err := tx.Get(AuditKey(seq))
			if err == nil {
				err = json.Unmarshal(v, &e)
			}
			return err
		})
		return e
	}
	put := func(e schema.AuditEntry) {
		t.Helper()
		b, _ := json.Marshal(e)
		if _, err := s.Write(t.Context(), func(tx *Txn) error { return tx.Set(AuditKey(e.Seq), b) }); err != nil {
			t.Fatal(err)
		}
	}
	wantBroken := func(what string, seq uint64, reason string) {
		t.Helper()
		v := verify(t, s)
		if v.OK || v.Broken == nil || v.Broken.Seq != seq || !strings.Contains(v.Broken.Reason, reason) {
			t.Fatalf("%s: %+v %+v, want entry %d broken (%s)", what, v, v.Broken, seq, reason)
		}
	}

	orig := raw(3)
	e := orig
	e.Actor = "someone-else"
	put(e)
	wantBroken("an edited entry", 3, "edited")
	e.Hash, _ = AuditEntryHash(e)
	put(e)
	wantBroken("an edited entry with its hash recomputed", 4, "prev hash")
	put(orig)
	if v := verify(t, s); !v.OK {
		t.Fatalf("restored: %+v", v.Broken)
	}

	saved := raw(2)
	if _, err := s.Write(t.Context(), func(tx *Txn) error { return tx.Delete(AuditKey(2)) }); err != nil {
		t.Fatal(err)
	}
	wantBroken("a removed entry", 2, "missing")
	put(saved)
	if _, err := s.Write(t.Context(), func(tx *Txn) error { return tx.Delete(AuditKey(6)) }); err != nil {
		t.Fatal(err)
	}
	wantBroken("the newest entry removed", 6, "missing")
	put(es[5])
	if _, err := s.Write(t.Context(), func(tx *Txn) error { return tx.Set(AuditKey(5), []byte("{not json")) }); err != nil {
		t.Fatal(err)
	}
	wantBroken("an entry that does not decode", 5, "does not decode")
	put(es[4])
	if _, err := s.Write(t.Context(), func(tx *Txn) error {
		return tx.Set(keyAuditAnchor, []byte(`{"seq":0,"hash":"00"}`))
	}); err != nil {
		t.Fatal(err)
	}
	wantBroken("an edited anchor", 1, "prev hash")
}

// TestAuditPrunedByAgeAndSize: entries older than the retention go, and
// the oldest go while the trail is over its size, never the newest; the
// anchor keeps the hash of the last one pruned, so the chain still
// verifies, also after a reopen; a quiet trail is pruned by PruneAudit.
func TestAuditPrunedByAgeAndSize(t *testing.T) {
	dir := t.TempDir()
	clk := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := Open(Options{Dir: dir, GCInterval: -1, Now: clk.Now, AuditRetention: time.Hour, AuditMaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	appendAudit(t, s, 5, "admin")
	last, _ := s.Audit(t.Context(), AuditQuery{Limit: 1})
	clk.Add(30 * time.Minute)
	appendAudit(t, s, 2, "admin")
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[1 2 3 4 5 6 7]" {
		t.Fatalf("within the retention: %s", got)
	}
	clk.Add(45 * time.Minute) // entries 1 to 5 are 75 minutes old
	if err := s.PruneAudit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[6 7]" {
		t.Fatalf("after the retention: %s", got)
	}
	if v := verify(t, s); !v.OK || v.Anchor.Seq != 5 || v.Anchor.Hash != last[0].Hash || v.FirstSeq != 6 {
		t.Fatalf("verify after pruning: %+v %+v", v, v.Broken)
	}
	clk.Add(2 * time.Hour)
	appendAudit(t, s, 1, "admin")
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[8]" {
		t.Fatalf("all old: %s", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// By size: each entry here is about 300 bytes.
	s, err = Open(Options{Dir: dir, GCInterval: -1, Now: clk.Now, AuditRetention: -1, AuditMaxBytes: 3000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := verify(t, s); !v.OK || v.Anchor.Seq != 7 {
		t.Fatalf("after a reopen: %+v %+v", v, v.Broken)
	}
	appendAudit(t, s, 40, "viewer")
	got := seqs(t, s, AuditQuery{})
	if len(got) < 5 || len(got) > 12 || got[len(got)-1] != 48 {
		t.Fatalf("within 3000 bytes: %v", got)
	}
	if s.audit.bytes > 3000 {
		t.Errorf("the trail takes %d bytes, over its bound", s.audit.bytes)
	}
	if v := verify(t, s); !v.OK || v.Anchor.Seq != got[0]-1 || v.Entries != len(got) {
		t.Fatalf("verify after pruning by size: %+v %+v", v, v.Broken)
	}
}

// TestAuditLegacyTrail: entries written before the chain stay, listed
// as unchained; the chain starts after them and verifies.
func TestAuditLegacyTrail(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		b := fmt.Appendf(nil, `{"seq":%d,"time":"2025-01-01T00:00:00Z","actor":"admin","action":"apply","result":"ok"}`, seq)
		if _, err := s.Write(t.Context(), func(tx *Txn) error { return tx.Set(AuditKey(seq), b) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, GCInterval: -1, AuditRetention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendAudit(t, s, 2, "admin")
	if v := verify(t, s); !v.OK || v.Unchained != 3 || v.Entries != 2 || v.FirstSeq != 4 {
		t.Fatalf("legacy trail: %+v %+v", v, v.Broken)
	}
}

// BenchmarkAppendAudit: one synced, chained append, and the trail's size
// per 1,000 such entries (keys and values, as the size bound counts them).
func BenchmarkAppendAudit(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := schema.AuditEntry{Actor: "admin", Role: "admin", Source: "127.0.0.1", Action: "apply", Object: "deployments/web",
		Result: schema.AuditOK, Detail: "deployments/web configured"}
	n := 0
	for b.Loop() {
		if _, err := s.AppendAudit(b.Context(), e); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(s.audit.bytes)*1000/float64(n), "B/1000entries")
}

// TestAuditDamagedNewestEntry: a newest entry that does not decode on
// open does not stop the trail: appends go on, and VerifyAudit names it.
func TestAuditDamagedNewestEntry(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	appendAudit(t, s, 3, "admin")
	if _, err := s.Write(t.Context(), func(tx *Txn) error { return tx.Set(AuditKey(3), []byte("{garbage")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendAudit(t, s, 1, "admin")
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[1 2 4]" {
		t.Fatalf("entries (the damaged one left out): %s", got)
	}
	if v := verify(t, s); v.OK || v.Broken.Seq != 3 || !strings.Contains(v.Broken.Reason, "does not decode") {
		t.Fatalf("verify: %+v %+v", v, v.Broken)
	}
}
