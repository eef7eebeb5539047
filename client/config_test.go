package client_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
)

func writeConfig(t *testing.T, path, hub, token string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fmt.Appendf(nil, "hub: %s\ntoken: %s\n", hub, token), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolveConfigPrecedence(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	home := filepath.Join(root, "home")
	local := writeConfig(t, filepath.Join(work, "fleet-data", "admin.conf"), "http://local:1", "tok-local")
	user := writeConfig(t, filepath.Join(home, ".config", "fleet", "config"), "http://user:1", "tok-user")
	explicit := writeConfig(t, filepath.Join(root, "explicit.conf"), "http://explicit:1", "tok-explicit")
	envFile := writeConfig(t, filepath.Join(root, "env.conf"), "http://envfile:1", "tok-envfile")
	noLocal := filepath.Join(root, "elsewhere")
	if err := os.MkdirAll(noLocal, 0o700); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name             string
		src              client.ConfigSources
		env              map[string]string
		hub, token       string
		hubSrc, tokenSrc string
	}{
		{"flags beat everything", client.ConfigSources{Hub: "http://flag:1", Token: "tok-flag", ConfigFile: explicit},
			map[string]string{"FLEET_HUB": "http://env:1", "FLEET_TOKEN": "tok-env"}, "http://flag:1", "tok-flag", "--hub", "--token"},
		{"env beats files", client.ConfigSources{},
			map[string]string{"FLEET_HUB": "http://env:1", "FLEET_TOKEN": "tok-env", "FLEET_CONFIG": envFile}, "http://env:1", "tok-env", "FLEET_HUB", "FLEET_TOKEN"},
		{"--config beats FLEET_CONFIG", client.ConfigSources{ConfigFile: explicit},
			map[string]string{"FLEET_CONFIG": envFile}, "http://explicit:1", "tok-explicit", explicit, explicit},
		{"FLEET_CONFIG beats ./fleet-data", client.ConfigSources{},
			map[string]string{"FLEET_CONFIG": envFile}, "http://envfile:1", "tok-envfile", envFile, envFile},
		{"./fleet-data beats the user config", client.ConfigSources{}, nil, "http://local:1", "tok-local", local, local},
		{"user config last", client.ConfigSources{WorkDir: noLocal}, nil, "http://user:1", "tok-user", user, user},
		{"XDG_CONFIG_HOME", client.ConfigSources{WorkDir: noLocal},
			map[string]string{"XDG_CONFIG_HOME": filepath.Join(home, ".config")}, "http://user:1", "tok-user", user, user},
		{"flag token with the file's hub", client.ConfigSources{Token: "tok-flag"}, nil, "http://local:1", "tok-flag", local, "--token"},
		{"flag hub naming the file's hub keeps its token", client.ConfigSources{Hub: "local:1"}, nil, "local:1", "tok-local", "--hub", local},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if src.WorkDir == "" {
				src.WorkDir = work
			}
			src.HomeDir = home
			src.Getenv = func(k string) string { return tt.env[k] }
			c, err := client.ResolveConfig(src)
			if err != nil {
				t.Fatal(err)
			}
			if c.Hub != tt.hub || c.Token != tt.token || c.HubSource != tt.hubSrc || c.TokenSource != tt.tokenSrc {
				t.Fatalf("got hub %s (%s) token %s (%s); want %s (%s) %s (%s)", c.Hub, c.HubSource, c.Token, c.TokenSource, tt.hub, tt.hubSrc, tt.token, tt.tokenSrc)
			}
			if strings.Contains(c.String(), c.Token) || strings.Contains(fmt.Sprintf("%v %+v %#v", c, c, c), c.Token) {
				t.Fatalf("config printing shows the token: %v", c)
			}
		})
	}
}

func TestResolveConfigErrors(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	writeConfig(t, filepath.Join(work, "fleet-data", "admin.conf"), "http://local:1", "tok-local")
	empty := filepath.Join(root, "empty")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(root, "garbage.conf")
	os.WriteFile(garbage, []byte("hub: [unclosed"), 0o600)
	noToken := writeConfig(t, filepath.Join(root, "notoken.conf"), "http://x:1", "")

	tests := []struct {
		name string
		src  client.ConfigSources
		env  map[string]string
		want string
	}{
		{"nothing configured", client.ConfigSources{WorkDir: empty}, nil, client.ErrNoHub.Error()},
		{"missing --config", client.ConfigSources{ConfigFile: filepath.Join(root, "nope.conf"), Hub: "http://h:1", Token: "t"}, nil, "nope.conf"},
		{"missing FLEET_CONFIG", client.ConfigSources{WorkDir: work}, map[string]string{"FLEET_CONFIG": filepath.Join(root, "nope.conf")}, "nope.conf"},
		{"unparsable file", client.ConfigSources{ConfigFile: garbage}, nil, "garbage.conf"},
		{"hub without token", client.ConfigSources{WorkDir: empty, Hub: "http://h:1"}, nil, "no token for hub http://h:1 (from --hub)"},
		{"file without token", client.ConfigSources{ConfigFile: noToken}, nil, "no token for hub http://x:1"},
		{"token of another hub is not sent", client.ConfigSources{WorkDir: work, Hub: "http://other:1"}, nil, "the token in"},
		{"bad hub address", client.ConfigSources{WorkDir: empty, Hub: "ftp://h", Token: "t"}, nil, "scheme must be http or https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			src.HomeDir = empty
			src.Getenv = func(k string) string { return tt.env[k] }
			c, err := client.ResolveConfig(src)
			if err == nil {
				t.Fatalf("resolved %v", c)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "tok-local") {
				t.Fatalf("error shows a token: %v", err)
			}
		})
	}
	_, err := client.ResolveConfig(client.ConfigSources{WorkDir: empty, HomeDir: empty, Getenv: func(string) string { return "" }})
	if !errors.Is(err, client.ErrNoHub) {
		t.Fatalf("got %v, want ErrNoHub", err)
	}
}

func TestLoadConfigFileAcceptsJSONAndUnknownKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "admin.conf")
	os.WriteFile(p, []byte(`{"hub":"http://127.0.0.1:8080","token":"abc","mqtt":"tcp://x:1883"}`), 0o600)
	c, err := client.LoadConfigFile(p)
	if err != nil || c.Hub != "http://127.0.0.1:8080" || c.Token != "abc" {
		t.Fatalf("got %v, %v", c, err)
	}
}

// contextsFile is a user config with two contexts, site-a current.
const contextsFile = `current-context: site-a
contexts:
- name: site-a
  hub: http://a:1
  token: tok-a
- name: lab
  hub: http://lab:1
  token: tok-lab
`

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolveConfigContexts(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	home := filepath.Join(root, "home")
	local := writeConfig(t, filepath.Join(work, "fleet-data", "admin.conf"), "http://local:1", "tok-local")
	user := writeFile(t, filepath.Join(home, ".config", "fleet", "config"), contextsFile)
	noCurrent := writeFile(t, filepath.Join(root, "nocurrent.conf"), strings.Replace(contextsFile, "current-context: site-a\n", "", 1))
	xdgNoCurrent := filepath.Join(root, "xdg")
	writeFile(t, filepath.Join(xdgNoCurrent, "fleet", "config"), strings.Replace(contextsFile, "current-context: site-a\n", "", 1))
	mixed := writeFile(t, filepath.Join(root, "mixed.conf"), "hub: http://flat:1\ntoken: tok-flat\n"+strings.Replace(contextsFile, "current-context: site-a\n", "", 1))
	ctxA := fmt.Sprintf("context %q in %s", "site-a", user)
	ctxLab := fmt.Sprintf("context %q in %s", "lab", user)

	tests := []struct {
		name             string
		src              client.ConfigSources
		env              map[string]string
		hub, token       string
		hubSrc, tokenSrc string
		context          string
	}{
		{"current-context beats ./fleet-data", client.ConfigSources{}, nil, "http://a:1", "tok-a", ctxA, ctxA, "site-a"},
		{"--context beats current-context", client.ConfigSources{Context: "lab"}, nil, "http://lab:1", "tok-lab", ctxLab, ctxLab, "lab"},
		{"FLEET_CONTEXT", client.ConfigSources{}, map[string]string{"FLEET_CONTEXT": "lab"}, "http://lab:1", "tok-lab", ctxLab, ctxLab, "lab"},
		{"--context beats FLEET_CONTEXT", client.ConfigSources{Context: "site-a"}, map[string]string{"FLEET_CONTEXT": "lab"}, "http://a:1", "tok-a", ctxA, ctxA, "site-a"},
		{"environment beats --context", client.ConfigSources{Context: "lab"},
			map[string]string{"FLEET_HUB": "http://env:1", "FLEET_TOKEN": "tok-env"}, "http://env:1", "tok-env", "FLEET_HUB", "FLEET_TOKEN", ""},
		{"flags beat the context", client.ConfigSources{Context: "lab", Hub: "http://flag:1", Token: "tok-flag"}, nil, "http://flag:1", "tok-flag", "--hub", "--token", ""},
		{"flag token with the context's hub", client.ConfigSources{Token: "tok-flag"}, nil, "http://a:1", "tok-flag", ctxA, "--token", "site-a"},
		{"flag hub naming the context's hub keeps its token", client.ConfigSources{Hub: "a:1", Context: "site-a"}, nil, "a:1", "tok-a", "--hub", ctxA, "site-a"},
		{"contexts but no current-context: ./fleet-data", client.ConfigSources{}, map[string]string{"XDG_CONFIG_HOME": xdgNoCurrent},
			"http://local:1", "tok-local", local, local, ""},
		{"--config with contexts", client.ConfigSources{ConfigFile: noCurrent, Context: "lab"}, nil,
			"http://lab:1", "tok-lab", fmt.Sprintf("context %q in %s", "lab", noCurrent), fmt.Sprintf("context %q in %s", "lab", noCurrent), "lab"},
		{"flat keys when no context is selected", client.ConfigSources{ConfigFile: mixed}, nil, "http://flat:1", "tok-flat", mixed, mixed, ""},
		{"flags need no current-context", client.ConfigSources{ConfigFile: writeFile(t, filepath.Join(root, "dangling.conf"), "current-context: gone\n"), Hub: "http://flag:1", Token: "tok-flag"}, nil,
			"http://flag:1", "tok-flag", "--hub", "--token", ""},
		{"a context beats the flat keys", client.ConfigSources{ConfigFile: mixed, Context: "lab"}, nil,
			"http://lab:1", "tok-lab", fmt.Sprintf("context %q in %s", "lab", mixed), fmt.Sprintf("context %q in %s", "lab", mixed), "lab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			src.WorkDir, src.HomeDir = work, home
			src.Getenv = func(k string) string { return tt.env[k] }
			c, err := client.ResolveConfig(src)
			if err != nil {
				t.Fatal(err)
			}
			if c.Hub != tt.hub || c.Token != tt.token || c.HubSource != tt.hubSrc || c.TokenSource != tt.tokenSrc || c.Context != tt.context {
				t.Fatalf("got hub %s (%s) token %s (%s) context %q;\nwant %s (%s) %s (%s) %q", c.Hub, c.HubSource, c.Token, c.TokenSource, c.Context, tt.hub, tt.hubSrc, tt.token, tt.tokenSrc, tt.context)
			}
		})
	}
}

func TestResolveConfigContextErrors(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	empty := filepath.Join(root, "empty")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	user := writeFile(t, filepath.Join(home, ".config", "fleet", "config"), contextsFile)
	dangling := writeFile(t, filepath.Join(root, "dangling.conf"), strings.Replace(contextsFile, "current-context: site-a", "current-context: gone", 1))
	noCurrent := writeFile(t, filepath.Join(root, "nocurrent.conf"), strings.Replace(contextsFile, "current-context: site-a\n", "", 1))
	dup := writeFile(t, filepath.Join(root, "dup.conf"), contextsFile+"- name: lab\n  hub: http://x:1\n")
	noContexts := writeFile(t, filepath.Join(root, "none.conf"), "hub: http://flat:1\ntoken: t\n")
	wrongType := writeFile(t, filepath.Join(root, "wrongtype.conf"), "contexts: {name: a}\n")

	tests := []struct {
		name string
		src  client.ConfigSources
		home string
		env  map[string]string
		want string
	}{
		{"unknown --context", client.ConfigSources{Context: "site-b"}, home, nil,
			fmt.Sprintf(`context "site-b" (from --context) not found in %s; contexts: site-a, lab`, user)},
		{"unknown FLEET_CONTEXT", client.ConfigSources{}, home, map[string]string{"FLEET_CONTEXT": "site-b"},
			fmt.Sprintf(`context "site-b" (from FLEET_CONTEXT) not found in %s; contexts: site-a, lab`, user)},
		{"a typo in --context is reported even when flags set everything", client.ConfigSources{Context: "site-b", Hub: "http://h:1", Token: "t"}, home, nil,
			`context "site-b" (from --context) not found`},
		{"dangling current-context", client.ConfigSources{ConfigFile: dangling}, home, nil,
			fmt.Sprintf(`context "gone" (from current-context) not found in %s; contexts: site-a, lab`, dangling)},
		{"--context without a config file", client.ConfigSources{Context: "lab"}, empty, nil,
			fmt.Sprintf(`context "lab" (from --context) not found: %s does not exist`, filepath.Join(empty, ".config", "fleet", "config"))},
		{"--context in a file without contexts", client.ConfigSources{ConfigFile: noContexts, Context: "lab"}, home, nil,
			"it has no contexts"},
		{"contexts but none current", client.ConfigSources{ConfigFile: noCurrent}, home, nil,
			noCurrent + " has the contexts site-a, lab but no current-context"},
		{"token of another hub is not sent", client.ConfigSources{Context: "site-a"}, home, map[string]string{"FLEET_HUB": "http://other:1"},
			fmt.Sprintf(`no token for hub http://other:1 (from FLEET_HUB): pass --token or set FLEET_TOKEN; the token in context "site-a" in %s is for hub "http://a:1"`, user)},
		{"a context twice", client.ConfigSources{ConfigFile: dup}, home, nil, `context "lab" appears twice`},
		{"contexts of the wrong type", client.ConfigSources{ConfigFile: wrongType}, home, nil, "wrongtype.conf: contexts: want a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			src.WorkDir, src.HomeDir = empty, tt.home
			src.Getenv = func(k string) string { return tt.env[k] }
			c, err := client.ResolveConfig(src)
			if err == nil {
				t.Fatalf("resolved %v", c)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "tok-") {
				t.Fatalf("error shows a token: %v", err)
			}
		})
	}
	_, err := client.ResolveConfig(client.ConfigSources{ConfigFile: noCurrent, WorkDir: empty, HomeDir: home, Getenv: func(string) string { return "" }})
	if !errors.Is(err, client.ErrNoHub) {
		t.Fatalf("contexts but none current: %v, want ErrNoHub", err)
	}
	var nf *client.ContextNotFoundError
	_, err = client.ResolveConfig(client.ConfigSources{Context: "x", WorkDir: empty, HomeDir: home, Getenv: func(string) string { return "" }})
	if !errors.As(err, &nf) || nf.Name != "x" || nf.Path != user {
		t.Fatalf("got %v, want a ContextNotFoundError", err)
	}
}

func TestLoadConfigFileCurrentContext(t *testing.T) {
	p := writeFile(t, filepath.Join(t.TempDir(), "config"), contextsFile)
	c, err := client.LoadConfigFile(p)
	if err != nil || c.Hub != "http://a:1" || c.Token != "tok-a" || c.Context != "site-a" {
		t.Fatalf("got %v (context %q), %v", c, c.Context, err)
	}
}

func TestUserConfigPath(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src      client.ConfigSources
		env      map[string]string
		want     string
		explicit bool
	}{
		{"--config", client.ConfigSources{ConfigFile: "/x/flag.conf"}, map[string]string{"FLEET_CONFIG": "/x/env.conf"}, "/x/flag.conf", true},
		{"FLEET_CONFIG", client.ConfigSources{}, map[string]string{"FLEET_CONFIG": "/x/env.conf", "XDG_CONFIG_HOME": "/xdg"}, "/x/env.conf", true},
		{"XDG_CONFIG_HOME", client.ConfigSources{HomeDir: "/home/u"}, map[string]string{"XDG_CONFIG_HOME": "/xdg"}, "/xdg/fleet/config", false},
		{"a relative XDG_CONFIG_HOME is ignored", client.ConfigSources{HomeDir: "/home/u"}, map[string]string{"XDG_CONFIG_HOME": "xdg"}, "/home/u/.config/fleet/config", false},
		{"home", client.ConfigSources{HomeDir: "/home/u"}, nil, "/home/u/.config/fleet/config", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			src.Getenv = func(k string) string { return tc.env[k] }
			got, explicit, err := client.UserConfigPath(src)
			if err != nil || got != tc.want || explicit != tc.explicit {
				t.Fatalf("got %q explicit=%v err=%v; want %q explicit=%v", got, explicit, err, tc.want, tc.explicit)
			}
		})
	}
}
