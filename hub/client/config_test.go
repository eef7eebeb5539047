package client_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/client"
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
