package logwriter

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEncodeDecode(t *testing.T) {
	o := Options{Path: "/var/lib/fleet/logs/a b&c=d.log", MaxBytes: 1 << 20, MaxFiles: 3}
	got, err := Decode(o.Encode())
	if err != nil || got != o {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", o, got, err)
	}
	for _, bad := range []string{"path=rel.log", "path=/x&max-size=ten", "path=/x&max-files=-1", "path=/x&color=red", "%zz"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q): no error", bad)
		}
	}
}

// sizes returns the files of the log at p, newest last, and their total.
func sizes(t *testing.T, p string) (map[string]int64, int64) {
	t.Helper()
	out := map[string]int64{}
	var total int64
	for _, f := range append(Files(p), p) {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		out[filepath.Base(f)] = fi.Size()
		total += fi.Size()
	}
	return out, total
}

func TestWriterRotatesAtLineEnds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	w, err := Open(Options{Path: p, MaxBytes: 10, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Line ends at 4, 8, 12: the first file takes two lines.
	for _, s := range []string{"aaa\nbbb\nccc\n", "ddd\n", "eee\nfff\n", "ggg\n"} {
		w.Write([]byte(s))
	}
	// "aaa\nbbb\n" was the first file; it dropped out when "ggg\n"
	// started the fourth.
	want := map[string]string{"c.log.2": "ccc\nddd\n", "c.log.1": "eee\nfff\n", "c.log": "ggg\n"}
	for name, content := range want {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(p), name))
		if err != nil || string(b) != content {
			t.Errorf("%s = %q, %v; want %q", name, b, err, content)
		}
	}
	if _, err := os.Stat(p + ".3"); err == nil {
		t.Error("c.log.3 exists with MaxFiles 2")
	}
}

func TestWriterCutsLongLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	w, err := Open(Options{Path: p, MaxBytes: 4, MaxFiles: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write([]byte("ab\n"))
	w.Write([]byte("0123456789"))
	var all []byte
	for _, f := range append(Files(p), p) {
		b, _ := os.ReadFile(f)
		if len(b) > 4 {
			t.Errorf("%s holds %d bytes, over the cap 4", f, len(b))
		}
		all = append(all, b...)
	}
	if string(all) != "ab\n0123456789" {
		t.Errorf("files read in order = %q", all)
	}
}

func TestWriterBoundUnderLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	o := Options{Path: p, MaxBytes: 64 << 10, MaxFiles: 3}
	w, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	line := []byte(strings.Repeat("x", 99) + "\n")
	chunk := bytes.Repeat(line, 300) // 30000 bytes, not a divisor of the cap
	for i := 0; i < 200; i++ {
		w.Write(chunk)
		if _, total := sizes(t, p); total > o.Bound() {
			t.Fatalf("after %d writes: %d bytes on disk, bound %d", i+1, total, o.Bound())
		}
	}
	files, _ := sizes(t, p)
	if len(files) != 4 {
		t.Errorf("files %v, want the live one and 3 rotated", files)
	}
	for _, f := range append(Files(p), p) {
		b, _ := os.ReadFile(f)
		if len(b)%100 != 0 || (len(b) > 0 && b[len(b)-1] != '\n') {
			t.Errorf("%s: %d bytes, not whole lines", f, len(b))
		}
	}
	if w.Dropped() != 0 {
		t.Errorf("dropped %d", w.Dropped())
	}
}

func TestOpenKeepsAndTrims(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.log")
	for _, f := range []string{"c.log", "c.log.1", "c.log.2", "c.log.3", "c.log.x", "c.log.previous"} {
		os.WriteFile(filepath.Join(dir, f), []byte("12345"), 0o644)
	}
	w, err := Open(Options{Path: p, MaxBytes: 8, MaxFiles: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("678"))
	w.Close()
	b, _ := os.ReadFile(p)
	if string(b) != "12345678" {
		t.Errorf("live file %q, want it appended to", b)
	}
	for f, want := range map[string]bool{"c.log.1": true, "c.log.2": false, "c.log.3": false, "c.log.x": true, "c.log.previous": true} {
		if _, err := os.Stat(filepath.Join(dir, f)); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", f, err == nil, want)
		}
	}
}

func TestWriterDropsWhileUnopenable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "c.log") // no such directory yet
	if _, err := Open(Options{Path: p}); err == nil {
		t.Fatal("Open in a missing directory: no error")
	}
	now := time.Unix(1000, 0)
	w := newWriter(Options{Path: p, MaxFiles: 1})
	w.now = func() time.Time { return now }
	w.failedAt = now
	if n, err := w.Write([]byte("lost\n")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	os.Mkdir(filepath.Dir(p), 0o755)
	w.Write([]byte("lost too\n")) // within a second of the failure
	now = now.Add(reopenEvery)
	w.Write([]byte("kept\n"))
	w.Close()
	b, _ := os.ReadFile(p)
	if string(b) != "kept\n" || w.Dropped() != 14 {
		t.Errorf("log %q, dropped %d; want kept, 14", b, w.Dropped())
	}
}

func TestRunCopiesBothStreams(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	readied := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- Run(context.Background(), Options{Path: p, MaxBytes: 1 << 20}, []io.Reader{outR, errR}, func() error {
			close(readied)
			return nil
		})
	}()
	<-readied
	fmt.Fprintln(outW, "out")
	fmt.Fprintln(errW, "err")
	outW.Close()
	errW.Close()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if s := string(b); s != "out\nerr\n" && s != "err\nout\n" {
		t.Errorf("log %q", s)
	}
}

func TestRunStopsAfterGrace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	r, w := io.Pipe() // never closed: a child holding the task's stdout
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- Run(ctx, Options{Path: p}, []io.Reader{r}, nil) }()
	cancel()
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(Grace + 10*time.Second):
		t.Fatal("Run did not return after its grace period")
	}
}
