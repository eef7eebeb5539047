package client_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
)

// TestConfigFileKeepsWhatItDoesNotKnow: a rewrite keeps unknown keys at the
// top level and in contexts, every context, and the flat hub and token.
func TestConfigFileKeepsWhatItDoesNotKnow(t *testing.T) {
	p := writeFile(t, filepath.Join(t.TempDir(), "config"), `# a comment
hub: http://flat:1
token: tok-flat
preferences: {color: false, retries: 3}
current-context: site-a
contexts:
- name: site-a
  hub: http://a:1
  token: tok-a
  certificate-authority-data: Q0EK
- name: lab
  hub: http://lab:1
`)
	f, err := client.ReadConfigFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.ContextNames(), ","); got != "site-a,lab" || f.CurrentContext != "site-a" || f.Hub != "http://flat:1" || f.Token != "tok-flat" {
		t.Fatalf("read %+v", f)
	}
	if created := f.SetContext(client.Context{Name: "site-a", Hub: "https://a:2", Token: "tok-a2"}); created {
		t.Fatal("SetContext of an existing context says it created it")
	}
	if created := f.SetContext(client.Context{Name: "site-b", Hub: "http://b:1", Token: "tok-b"}); !created {
		t.Fatal("SetContext of a new context says it replaced one")
	}
	if err := f.UseContext("lab"); err != nil {
		t.Fatal(err)
	}
	if err := f.Write(); err != nil {
		t.Fatal(err)
	}
	want := `# fleet CLI config: hubs and their tokens (see "fleet config --help").
# Keep it private: the tokens grant control of the fleets.
contexts:
- certificate-authority-data: Q0EK
  hub: https://a:2
  name: site-a
  token: tok-a2
- hub: http://lab:1
  name: lab
- hub: http://b:1
  name: site-b
  token: tok-b
current-context: lab
hub: http://flat:1
preferences:
  color: false
  retries: 3
token: tok-flat
`
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("wrote\n%s\nwant\n%s", got, want)
	}
	again, err := client.ReadConfigFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := again.Context("site-b"); !ok || c.Hub != "http://b:1" || c.Token != "tok-b" {
		t.Fatalf("site-b after a round trip: %+v %v", c, ok)
	}
}

func TestConfigFileWriteIsPrivateAndAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "new", "sub", "config")
	f, err := client.ReadOrNewConfigFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f.SetContext(client.Context{Name: "a", Hub: "http://a:1", Token: "tok"})
	if err := f.Write(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(filepath.Dir(p)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v; want mode 0700", st.Mode().Perm(), err)
	}
	// A file that was readable by others becomes private on rewrite.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.Write(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten with mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}

	// A config file that is a symbolic link (dotfiles) stays one.
	real := writeFile(t, filepath.Join(dir, "dotfiles", "fleet"), "contexts: []\n")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal("symlink:", err)
	}
	lf, err := client.ReadConfigFile(link)
	if err != nil {
		t.Fatal(err)
	}
	lf.SetContext(client.Context{Name: "b", Hub: "http://b:1"})
	if err := lf.Write(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", st.Mode(), err)
	}
	if b, _ := os.ReadFile(real); !strings.Contains(string(b), "name: b") {
		t.Fatalf("the link's target was not written:\n%s", b)
	}
}

func TestConfigFileEdits(t *testing.T) {
	f, err := client.ReadConfigFile(writeFile(t, filepath.Join(t.TempDir(), "config"), contextsFile))
	if err != nil {
		t.Fatal(err)
	}
	var nf *client.ContextNotFoundError
	if err := f.UseContext("nope"); !errors.As(err, &nf) || !strings.Contains(err.Error(), `context "nope" not found in `+f.Path+"; contexts: site-a, lab") {
		t.Fatalf("use-context of an unknown context: %v", err)
	}
	if wasCurrent, err := f.DeleteContext("lab"); err != nil || wasCurrent {
		t.Fatalf("delete lab: %v %v", wasCurrent, err)
	}
	if wasCurrent, err := f.DeleteContext("site-a"); err != nil || !wasCurrent || f.CurrentContext != "" {
		t.Fatalf("delete the current context: %v %v, current %q", wasCurrent, err, f.CurrentContext)
	}
	if _, err := f.DeleteContext("site-a"); !errors.As(err, &nf) || !strings.Contains(err.Error(), "it has no contexts") {
		t.Fatalf("delete again: %v", err)
	}
}

func TestConfigFileRedacted(t *testing.T) {
	f, err := client.ReadConfigFile(writeFile(t, filepath.Join(t.TempDir(), "config"), `token: tok-flat
api-secret: s3cret
contexts:
- name: a
  hub: http://a:1
  token: tok-a
  client-key-data: a2V5
  certificate-authority-data: Q0EK
- name: b
  hub: http://b:1
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Redacted().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, secret := range []string{"tok-flat", "tok-a", "s3cret", "a2V5"} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted config shows %q:\n%s", secret, out)
		}
	}
	for _, kept := range []string{"certificate-authority-data: Q0EK", "token: REDACTED", "hub: http://b:1"} {
		if !strings.Contains(out, kept) {
			t.Errorf("redacted config lacks %q:\n%s", kept, out)
		}
	}
	if strings.Count(out, "REDACTED") != 4 {
		t.Errorf("want 4 redactions (two tokens, a secret, a key), a context without a token stays without:\n%s", out)
	}
	// The original is untouched.
	if c, _ := f.Context("a"); c.Token != "tok-a" {
		t.Fatalf("Redacted changed the original: %q", c.Token)
	}
}

func TestReadConfigFileForms(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          string // ContextNames, or the error
	}{
		{"empty", "", ""},
		{"comments only", "# nothing yet\n", ""},
		{"json", `{"current-context":"a","contexts":[{"name":"a","hub":"http://a:1"}]}`, "a"},
		{"flat admin.conf", "hub: http://h:1\ntoken: t\n", ""},
		{"not a mapping", "- a\n- b\n", "error: want a mapping"},
		{"a context that is not a mapping", "contexts: [a]\n", "error: contexts: [0]: want a context"},
		{"a context without a name", "contexts: [{hub: http://a:1}]\n", "error: contexts[0]: context name is empty"},
		{"a name with a space", "contexts: [{name: a b}]\n", "error: must not contain spaces"},
		{"a hub that is not a string", "contexts: [{name: a, hub: [1]}]\n", "error: hub: want a string"},
		{"broken yaml", "contexts: [\n", "error: config "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")), tc.content)
			f, err := client.ReadConfigFile(p)
			got := ""
			if err != nil {
				got = "error: " + err.Error()
			} else {
				got = strings.Join(f.ContextNames(), ",")
			}
			if tc.want == "" && got != "" || !strings.HasPrefix(tc.want, "error: ") && got != tc.want || strings.HasPrefix(tc.want, "error: ") && !strings.Contains(got, strings.TrimPrefix(tc.want, "error: ")) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := client.ReadConfigFile(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
}
