package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunWritesTheDescription(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "src.yaml"), filepath.Join(dir, "out.yaml")
	if err := os.WriteFile(src, []byte("openapi: 3.0.3\ninfo: {title: t, version: v1}\npaths: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-src", src, "-out", out, "-root", "../../.."}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "GENERATED") || !strings.Contains(string(b), "\n    Deployment:\n") {
		t.Errorf("output lacks the header or the Deployment schema:\n%.500s", b)
	}
	if err := run([]string{"-src", filepath.Join(dir, "missing.yaml"), "-out", out, "-root", "../../.."}); err == nil || !strings.Contains(err.Error(), "read source") {
		t.Errorf("missing source: %v", err)
	}
}
