package fielddoc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	goFile, mdFile := filepath.Join(dir, "zz.go"), filepath.Join(dir, "docs", "reference.md")
	p, err := Generate(Options{Dir: "testdata/api", GoFile: goFile, MarkdownFile: mdFile})
	if err != nil {
		t.Fatal(err)
	}
	wantGo, err := GoSource(p, "schema/fielddoc/gen")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		goFile: wantGo,
		mdFile: Markdown(p, "schema/fielddoc/gen", "schema/"),
	} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: Generate wrote other bytes than the renderers give with the default options", path)
		}
	}
	// Neither output: only parses.
	if _, err := Generate(Options{Dir: "testdata/api"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(Options{Dir: filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing directory must fail")
	}
	if _, err := Generate(Options{Dir: "testdata/api", GoFile: filepath.Join(goFile, "sub", "x.go")}); err == nil {
		t.Error("an unwritable output must fail")
	}
}
