package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	goFile, mdFile := filepath.Join(dir, "zz.go"), filepath.Join(dir, "ref.md")
	if err := run([]string{"-dir", "../testdata/api", "-go", goFile, "-md", mdFile, "-source", "testdata/api/"}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(mdFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "in testdata/api/; DO NOT EDIT.") || !strings.Contains(string(md), "## Widget") {
		t.Errorf("reference:\n%s", md)
	}
	if _, err := os.Stat(goFile); err != nil {
		t.Error(err)
	}
	for _, args := range [][]string{{"extra"}, {"-nope"}, {"-dir", filepath.Join(dir, "missing")}} {
		if err := run(args); err == nil {
			t.Errorf("run %q: want an error", args)
		}
	}
}
