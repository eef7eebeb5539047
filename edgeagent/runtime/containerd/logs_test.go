package containerd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRotateIdle(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.log")
	if err := rotateIdle(p, 10); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	write(t, p, "small")
	if err := rotateIdle(p, 10); err != nil {
		t.Fatal(err)
	}
	if read(t, p) != "small" {
		t.Fatal("file under the cap was rotated")
	}
	write(t, p+".1", "older")
	write(t, p, "this is over ten bytes")
	if err := rotateIdle(p, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("log still there: %v", err)
	}
	if got := read(t, p+".1"); got != "this is over ten bytes" {
		t.Errorf(".1 = %q", got)
	}
}

func TestRotateLive(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.log")
	if rotated, err := rotateLive(p, 10); rotated || err != nil {
		t.Fatalf("missing file: %v, %v", rotated, err)
	}
	write(t, p, "small")
	if rotated, err := rotateLive(p, 10); rotated || err != nil {
		t.Fatalf("small file: %v, %v", rotated, err)
	}

	// A writer holding the file open with O_APPEND, as the shim does.
	w, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString(strings.Repeat("x", 20)); err != nil {
		t.Fatal(err)
	}
	rotated, err := rotateLive(p, 10)
	if !rotated || err != nil {
		t.Fatalf("big file: %v, %v", rotated, err)
	}
	if got := read(t, p+".1"); got != "small"+strings.Repeat("x", 20) {
		t.Errorf(".1 = %q", got)
	}
	if _, err := w.WriteString("after"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, p); got != "after" {
		t.Errorf("log after rotation = %q, want the writer's next write at offset 0", got)
	}
	if _, err := os.Stat(p + ".1.tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
