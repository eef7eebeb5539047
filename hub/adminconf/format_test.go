package adminconf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarshal pins the text of admin.conf (cmd/fleet-hub checks it
// against the client package's).
func TestMarshal(t *testing.T) {
	const head = "# Fleet hub admin client config, written by fleet-hub. Keep it secret:\n" +
		"# the token grants full control of the fleet.\n"
	if got, want := string(Marshal(Config{Hub: "http://127.0.0.1:8080", Token: "t0k"})),
		head+"hub: http://127.0.0.1:8080\ntoken: t0k\n"; got != want {
		t.Errorf("without CA:\n%s\nwant:\n%s", got, want)
	}
	if got, want := string(Marshal(Config{Hub: "https://h:8443", Token: "t", CA: "PEM"})),
		head+"hub: https://h:8443\ntoken: t\n"+
			"# The hub's CA (PEM, base64), which fleet verifies an https:// hub against.\n"+
			"certificate-authority-data: UEVN\n"; got != want {
		t.Errorf("with CA:\n%s\nwant:\n%s", got, want)
	}
}

// TestRead: Read reads what Marshal writes, ignores the keys it does not
// know, and refuses a file without a token or with a malformed value.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		t.Helper()
		path := filepath.Join(dir, "admin.conf")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []Config{
		{Hub: "http://127.0.0.1:8080", Token: "tok"},
		{Hub: "https://[::1]:8443", Token: "tok", CA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
	} {
		if got, err := Read(write(string(Marshal(c)))); err != nil || got != c {
			t.Errorf("Read(Marshal(%+v)) = %+v, %v", c, got, err)
		}
	}
	path := write("# a comment\ncurrent-context: a\ncontexts:\n- name: a\n  hub: http://a\n  token: other\nhub: ' http://h:1 '\ntoken: tok\nextra: [1, 2]\n")
	if got, err := Read(path); err != nil || got != (Config{Hub: "http://h:1", Token: "tok"}) {
		t.Errorf("with other keys: %+v, %v", got, err)
	}
	if _, err := Read(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	for name, text := range map[string]string{
		"empty":         "",
		"only comments": "# nothing\n",
		"no token":      "hub: http://h\n",
		"null token":    "hub: http://h\ntoken: null\n",
		"Token":         "hub: http://h\nToken: tok\n",
		"a list":        "- hub\n",
		"not YAML":      "hub: [\n",
		"a number":      "hub: http://h\ntoken: 12\n",
		"bad CA":        "hub: http://h\ntoken: tok\ncertificate-authority-data: '%%%'\n",
	} {
		if got, err := Read(write(text)); err == nil {
			t.Errorf("%s: %+v, want an error", name, got)
		} else if errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "read admin config") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
