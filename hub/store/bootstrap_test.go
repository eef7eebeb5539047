package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// fakeClock is an injectable clock for the store (Options.Now).
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func enrollment(tok, device string, i int) Enrollment {
	return Enrollment{
		Token: tok, Device: device,
		RequestID: fmt.Sprintf("req_%016d", i),
		Secret:    strings.Repeat("s", 31) + fmt.Sprint(i%10),
	}
}

func TestBootstrapTokenLifecycle(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := openTest(t, Options{Now: clk.Now, PasswordHash: func(tok string) (string, error) { return "$7$test$" + tok[:6], nil }})
	ctx := ctxT(t)

	tok, bt, err := s.CreateBootstrapToken(ctx, BootstrapTokenSpec{
		Description: "north site", Labels: map[string]string{"site": "north"}, TTL: time.Hour, Uses: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := schema.ParseBootstrapToken(tok)
	if err != nil || id != bt.ID {
		t.Fatalf("token %q does not parse to its ID %q: %v", tok[:7], bt.ID, err)
	}
	if !bt.Expires.Equal(clk.Now().Add(time.Hour)) || bt.Uses != 2 || bt.Used != 0 || bt.PasswordHash == "" {
		t.Errorf("created %+v", bt)
	}
	if got, ok := s.VerifyBootstrapToken(ctx, tok); !ok || got != bt.ID {
		t.Errorf("VerifyBootstrapToken = %q, %v", got, ok)
	}
	for _, bad := range []string{"", tok + "x", bt.ID + "." + strings.Repeat("a", 32), "zzzzzz." + tok[7:]} {
		if _, ok := s.VerifyBootstrapToken(ctx, bad); ok {
			t.Errorf("VerifyBootstrapToken accepted a wrong token")
		}
	}

	res, err := s.Enroll(ctx, enrollment(tok, "pi-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Retry || res.TokenID != bt.ID || !s.VerifyToken("pi-1", res.Token) {
		t.Errorf("enroll result %+v", res)
	}
	dev, err := s.Get(ctx, schema.KindDevice, "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	md := dev.GetMetadata()
	if md.Labels["site"] != "north" || md.Labels[schema.LabelDevice] != "pi-1" || md.Annotations[AnnotationBootstrapToken] != bt.ID {
		t.Errorf("enrolled device metadata %+v", md)
	}

	list, err := s.BootstrapTokens(ctx)
	if err != nil || len(list) != 1 || list[0].Used != 1 || list[0].Status(clk.Now()) != schema.BootstrapActive {
		t.Fatalf("list = %+v, %v", list, err)
	}

	clk.Advance(time.Hour)
	if _, err := s.Enroll(ctx, enrollment(tok, "pi-2", 2)); !errors.Is(err, ErrBootstrapExpired) {
		t.Errorf("enroll with an expired token: %v", err)
	}
	if _, ok := s.VerifyBootstrapToken(ctx, tok); !ok {
		t.Errorf("an expired token must still verify (the hub says why it refuses)")
	}

	deleted, err := s.DeleteBootstrapToken(ctx, bt.ID)
	if err != nil || deleted.ID != bt.ID {
		t.Fatalf("delete: %+v %v", deleted, err)
	}
	if _, err := s.DeleteBootstrapToken(ctx, bt.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, ok := s.VerifyBootstrapToken(ctx, tok); ok {
		t.Errorf("a deleted token verifies")
	}
	if !s.VerifyToken("pi-1", res.Token) {
		t.Errorf("deleting the bootstrap token revoked an enrolled device's token")
	}
}

func TestBootstrapTokenValidation(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	for _, spec := range []BootstrapTokenSpec{
		{Labels: map[string]string{"fleet/device": "x"}},
		{Labels: map[string]string{"bad key!": "x"}},
		{Labels: map[string]string{"site": "not ok!"}},
		{TTL: -time.Second},
		{Uses: -1},
	} {
		if _, _, err := s.CreateBootstrapToken(ctx, spec); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("CreateBootstrapToken(%+v) = %v, want ErrInvalid", spec, err)
		}
	}
	tok, _, err := s.CreateBootstrapToken(ctx, BootstrapTokenSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]Enrollment{
		"bad name":       {Token: tok, Device: "Pi_1", RequestID: "req_0000000000000001", Secret: strings.Repeat("s", 32)},
		"bad request id": {Token: tok, Device: "pi", RequestID: "short", Secret: strings.Repeat("s", 32)},
		"short secret":   {Token: tok, Device: "pi", RequestID: "req_0000000000000001", Secret: "s"},
	} {
		if _, err := s.Enroll(ctx, e); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.Enroll(ctx, enrollment("abcdef."+strings.Repeat("0", 32), "pi", 1)); !errors.Is(err, ErrBootstrapUnauthorized) {
		t.Errorf("unknown token: %v", err)
	}
	if _, err := s.Enroll(ctx, enrollment("garbage", "pi", 1)); !errors.Is(err, ErrBootstrapUnauthorized) {
		t.Errorf("malformed token: %v", err)
	}
}

// TestEnrollConcurrentUses: 50 concurrent enrollments with a token of 40
// uses: exactly 40 succeed and the rest are refused as used up.
func TestEnrollConcurrentUses(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	tok, bt, err := s.CreateBootstrapToken(ctx, BootstrapTokenSpec{Uses: 40})
	if err != nil {
		t.Fatal(err)
	}
	var ok, usedUp atomic.Int32
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, err := s.Enroll(ctx, enrollment(tok, fmt.Sprintf("dev-%02d", i), i))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrBootstrapUsedUp):
				usedUp.Add(1)
			default:
				t.Errorf("enroll %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 40 || usedUp.Load() != 10 {
		t.Errorf("%d enrolled, %d used up; want 40 and 10", ok.Load(), usedUp.Load())
	}
	list, err := s.BootstrapTokens(ctx)
	if err != nil || len(list) != 1 || list[0].ID != bt.ID || list[0].Used != 40 || list[0].Status(time.Now()) != schema.BootstrapUsedUp {
		t.Errorf("list = %+v, %v", list, err)
	}
	devs, _, err := s.ListDevices(ctx, nil)
	if err != nil || len(devs) != 40 {
		t.Errorf("%d devices, %v; want 40", len(devs), err)
	}
}

// TestEnrollNeverTakesOverAName: an existing device (added by an operator
// or enrolled by another request) and a credential's name are refused,
// and the existing device keeps its token.
func TestEnrollNeverTakesOverAName(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	tok, _, err := s.CreateBootstrapToken(ctx, BootstrapTokenSpec{Uses: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, newDevice("taken", nil), false); err != nil {
		t.Fatal(err)
	}
	owner, err := s.IssueToken(ctx, "taken")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enroll(ctx, enrollment(tok, "taken", 1)); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("enroll as an existing device: %v", err)
	}
	if !s.VerifyToken("taken", owner) {
		t.Errorf("the existing device lost its token")
	}
	if _, err := s.CreateCredential(ctx, "grafana", RoleMonitor); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enroll(ctx, enrollment(tok, "grafana", 2)); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("enroll as a credential's name: %v", err)
	}

	// Two requests for one new name: the first wins, the second is
	// refused and gets nothing.
	first, err := s.Enroll(ctx, enrollment(tok, "twin", 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enroll(ctx, enrollment(tok, "twin", 4)); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second request for the same name: %v", err)
	}
	if !s.VerifyToken("twin", first.Token) {
		t.Errorf("the second request replaced the first device's token")
	}
	list, err := s.BootstrapTokens(ctx)
	if err != nil || list[0].Used != 1 {
		t.Errorf("refused requests spent uses: %+v %v", list, err)
	}
}

// TestEnrollRetry: the same request sent again shortly after (its answer
// was lost) gets a new token for its device, spends no use and voids the
// first token; any other reuse of the request ID is refused.
func TestEnrollRetry(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := openTest(t, Options{Now: clk.Now})
	ctx := ctxT(t)
	tok, _, err := s.CreateBootstrapToken(ctx, BootstrapTokenSpec{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := enrollment(tok, "pi", 1)
	first, err := s.Enroll(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Enroll(ctx, req)
	if err != nil {
		t.Fatalf("retry of the same request (token now used up): %v", err)
	}
	if !again.Retry || again.Token == first.Token || !s.VerifyToken("pi", again.Token) || s.VerifyToken("pi", first.Token) {
		t.Errorf("retry: %+v; the new token must replace the first", again)
	}

	other := req
	other.Secret = strings.Repeat("x", 32)
	if _, err := s.Enroll(ctx, other); !errors.Is(err, ErrRequestReused) {
		t.Errorf("same request ID, another secret: %v", err)
	}
	other = req
	other.Device = "pi-other"
	if _, err := s.Enroll(ctx, other); !errors.Is(err, ErrRequestReused) {
		t.Errorf("same request ID, another device: %v", err)
	}
	clk.Advance(EnrollRetryWindow + time.Second)
	if _, err := s.Enroll(ctx, req); !errors.Is(err, ErrRequestReused) {
		t.Errorf("retry after the window: %v", err)
	}
	if !s.VerifyToken("pi", again.Token) {
		t.Errorf("refused retries changed the device's token")
	}
}
