package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// fleetOn runs the fleet CLI against h (its admin.conf) and returns
// stdout, stderr and the exit code.
func fleetOn(t *testing.T, h *Hub, args ...string) (string, string, int) {
	t.Helper()
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(t.TempDir()), "FLEET_CONFIG="+h.AdminConfig())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("fleet %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), 0
}

// auditEntries is the hub's whole trail (GET /v1/audit?limit=0).
func auditEntries(t *testing.T, h *Hub) []schema.AuditEntry {
	t.Helper()
	var l schema.AuditList
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/audit?limit=0", nil, http.StatusOK), &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// hubCPU is the CPU time (user and system) the process has used, from
// /proc/PID/stat, in clock ticks of 10 ms (USER_HZ on Linux).
func hubCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// refusalFlood sends n refused requests from several loopback sources:
// half a monitor's applies (403), half bad tokens (401, then 429 once the
// auth limiter throttles the source). It returns the answers by code.
func refusalFlood(t *testing.T, h *Hub, monitor string, n int) map[int]int {
	t.Helper()
	sources := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	clients := make([]*http.Client, len(sources))
	for i, src := range sources {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		clients[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: d.DialContext, MaxIdleConnsPerHost: 8,
		}}
	}
	body := []byte("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: evil}\n")
	var next atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				var req *http.Request
				if i%2 == 0 {
					req, _ = http.NewRequest(http.MethodPost, h.URL+"/v1/apply", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+monitor)
				} else {
					req, _ = http.NewRequest(http.MethodGet, h.URL+"/v1/devices", nil)
					req.Header.Set("Authorization", "Bearer wrong-"+strconv.Itoa(i))
				}
				code := -1
				if resp, err := clients[i%len(clients)].Do(req); err == nil {
					// Drained, so the connection is reused: 20,000 new
					// connections would take as many ephemeral ports,
					// which other tests' listeners then find in use.
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

// TestE2EAuditCannotBeFlushedOrEdited: against a real fleet-hub with a
// small size bound on its trail (2 MiB, which 20,000 entries of one
// refusal each would overflow many times), 20,000 refused requests from a
// monitor token and from bad tokens, from three sources, leave every
// earlier admin entry in place and are all counted; fleet audit verify
// passes. Then, the hub stopped, one old admin entry is edited in the
// store on disk: after a restart fleet audit verify fails naming it.
func TestE2EAuditCannotBeFlushedOrEdited(t *testing.T) {
	h := StartHub(t, HubOptions{Args: []string{"--audit-max-bytes", "2Mi"}})
	var cred schema.Credential
	if err := json.Unmarshal(mustDo(t, h, http.MethodPost, "/v1/credentials", []byte(`{"name":"grafana","role":"monitor"}`), http.StatusCreated), &cred); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		applyYAML(t, h, fmt.Sprintf("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi-%d}\n", i))
	}
	var before []schema.AuditEntry
	for _, e := range auditEntries(t, h) {
		if e.Actor == store.AdminCredential {
			before = append(before, e)
		}
	}
	if len(before) < 21 {
		t.Fatalf("want at least 21 admin entries before the flood, got %d", len(before))
	}

	// The monitor's token has worked before (a read): the auth limiter
	// then checks it even from a source it throttles, and it is refused
	// for its role (403), not unchecked (429).
	if code, body := doAs(t, h, cred.Token, http.MethodGet, "/v1/devices", ""); code != http.StatusOK {
		t.Fatalf("monitor read: %d %s", code, body)
	}
	const n = 20000
	cpu0 := hubCPU(t, h.PID())
	start := time.Now()
	codes := refusalFlood(t, h, cred.Token, n)
	took := time.Since(start)
	cpu := hubCPU(t, h.PID()) - cpu0
	t.Logf("%d refused requests in %v: answers %v; the hub used %v of CPU (%.0f µs a request)",
		n, took.Round(time.Millisecond), codes, cpu, float64(cpu.Microseconds())/n)
	if codes[http.StatusForbidden] != n/2 || codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != n/2 {
		t.Fatalf("answers: %v, want %d 403 and %d 401 or 429", codes, n/2, n/2)
	}

	after := auditEntries(t, h)
	bySeq := map[uint64]schema.AuditEntry{}
	for _, e := range after {
		bySeq[e.Seq] = e
	}
	for _, e := range before {
		if got, ok := bySeq[e.Seq]; !ok || got.Hash != e.Hash || got.Detail != e.Detail {
			t.Fatalf("admin entry %d (%s %s) was pushed out or changed by the flood: now %+v", e.Seq, e.Action, e.Object, got)
		}
	}
	t.Logf("the flood added %d entries to the trail", len(after)-len(before))
	if out, errOut, code := fleetOn(t, h, "audit", "verify"); code != 0 || !strings.HasPrefix(out, "audit trail intact: ") {
		t.Fatalf("fleet audit verify after the flood: exit %d\n%s%s", code, out, errOut)
	}

	// Stopped, the hub writes the counts of the minute's refusals.
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	victim := before[1] // the first apply
	st, err := store.Open(store.Options{Dir: filepath.Join(h.DataDir, "store"), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.Audit(t.Context(), store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	counted := 0
	for _, e := range stored {
		if (e.Actor == "grafana" || e.Actor == schema.AuditAnonymous) && e.Result != schema.AuditOK {
			counted += e.Count
		}
	}
	if counted != n {
		t.Errorf("the trail counts %d refusals, want %d", counted, n)
	}
	_, err = st.Write(t.Context(), func(tx *store.Txn) error {
		var e schema.AuditEntry
		b, err := tx.Get(store.AuditKey(victim.Seq))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		e.Detail = "nothing changed" // hide what the apply did
		b, err = json.Marshal(e)
		if err != nil {
			return err
		}
		return tx.Set(store.AuditKey(victim.Seq), b)
	})
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	h.Restart()
	out, errOut, code := fleetOn(t, h, "audit", "verify")
	if want := fmt.Sprintf("audit trail broken at entry %d: edited", victim.Seq); code == 0 || !strings.Contains(errOut, want) {
		t.Fatalf("fleet audit verify after an edit on disk: exit %d, want non-zero and %q\n%s%s", code, want, out, errOut)
	}
}

// TestE2EAuditRetention: with --audit-retention 3s, entries older than
// that are pruned and fleet audit verify still passes, anchored at the
// last pruned entry.
func TestE2EAuditRetention(t *testing.T) {
	h := StartHub(t, HubOptions{Args: []string{"--audit-retention", "3s"}})
	for i := range 5 {
		applyYAML(t, h, fmt.Sprintf("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi-%d}\n", i))
	}
	seen := map[uint64]string{} // seq -> hash of every entry listed
	list := func() []schema.AuditEntry {
		es := auditEntries(t, h)
		for _, e := range es {
			seen[e.Seq] = e.Hash
		}
		return es
	}
	first := list()
	last := first[len(first)-1].Seq
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Each verification is an entry too: appends prune.
		out, errOut, code := fleetOn(t, h, "audit", "verify", "-o", "json")
		if code != 0 {
			t.Fatalf("fleet audit verify: exit %d\n%s%s", code, out, errOut)
		}
		var v schema.AuditVerification
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		if !v.OK {
			t.Fatalf("verify: %+v", v.Broken)
		}
		kept := list()
		if v.Anchor.Seq >= last {
			if kept[0].Seq <= last || v.FirstSeq != v.Anchor.Seq+1 || seen[v.Anchor.Seq] != v.Anchor.Hash {
				t.Fatalf("after pruning: anchor %+v (listed with hash %q), verified from %d, oldest kept %d", v.Anchor, seen[v.Anchor.Seq], v.FirstSeq, kept[0].Seq)
			}
			t.Logf("pruned up to entry %d; %d entries kept", v.Anchor.Seq, len(kept))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries up to %d not pruned within 30 s of a 3 s retention: anchor %+v", last, v.Anchor)
		}
		time.Sleep(500 * time.Millisecond) // poll interval, not synchronisation
	}
}
