package runtime

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestFakeExec(t *testing.T) {
	ctx := context.Background()
	f := NewFake(FakeOptions{})
	if err := f.EnsureImage(ctx, "img", schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, spec("a", "img")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Exec(ctx, "a", []string{"true"}, time.Second); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("exec in a created container = %v", err)
	}
	if err := f.Start(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if code, out, err := f.Exec(ctx, "a", []string{"true"}, time.Second); code != 0 || len(out) != 0 || err != nil {
		t.Fatalf("default handler = %d %q %v", code, out, err)
	}
	if _, _, err := f.Exec(ctx, "a", nil, time.Second); err == nil {
		t.Fatal("empty command accepted")
	}

	var mu sync.Mutex
	var got [][]string
	f.SetExecHandler(func(ctx context.Context, id string, cmd []string) (int, []byte, error) {
		mu.Lock()
		got = append(got, append([]string{id}, cmd...))
		mu.Unlock()
		switch cmd[0] {
		case "fail":
			return 1, []byte("no"), nil
		case "big":
			return 0, bytes.Repeat([]byte("x"), ExecOutputMax+10), nil
		case "hang":
			<-ctx.Done()
			return -1, nil, ctx.Err()
		case "broken":
			return -1, nil, errors.New("no such file")
		}
		return 0, []byte("ok"), nil
	})
	if code, out, err := f.Exec(ctx, "a", []string{"fail", "x"}, time.Second); code != 1 || string(out) != "no" || err != nil {
		t.Errorf("fail = %d %q %v", code, out, err)
	}
	if _, out, err := f.Exec(ctx, "a", []string{"big"}, time.Second); len(out) != ExecOutputMax || err != nil {
		t.Errorf("big = %d bytes %v", len(out), err)
	}
	if _, _, err := f.Exec(ctx, "a", []string{"hang"}, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang = %v, want DeadlineExceeded", err)
	}
	if _, _, err := f.Exec(ctx, "a", []string{"broken"}, time.Second); err == nil {
		t.Error("a failing handler is no error")
	}
	mu.Lock()
	if len(got) != 4 || !slices.Equal(got[0], []string{"a", "fail", "x"}) {
		t.Errorf("handler saw %v", got)
	}
	mu.Unlock()
	if n := f.Calls().Exec; n != 6 {
		t.Errorf("Calls().Exec = %d, want 6", n)
	}
	if _, _, err := f.Exec(ctx, "zzz", []string{"x"}, time.Second); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown container = %v", err)
	}
}

func TestBoundedBuffer(t *testing.T) {
	b := &BoundedBuffer{Max: 5}
	for _, s := range []string{"ab", "cd", "ef", "gh"} {
		if n, err := b.Write([]byte(s)); n != 2 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if string(b.Bytes()) != "abcde" || !b.Truncated() {
		t.Errorf("kept %q, truncated %v", b.Bytes(), b.Truncated())
	}
	small := &BoundedBuffer{Max: 10}
	_, _ = small.Write([]byte("hi"))
	if small.Truncated() {
		t.Error("truncated without reason")
	}
}
