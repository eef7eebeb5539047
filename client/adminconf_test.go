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

func TestReadAdminConfig(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" writes no file
		want    client.AdminConfig
		wantErr string
	}{
		{"yaml", "hub: http://10.0.0.5:8080\ntoken: s3cret\n", client.AdminConfig{Hub: "http://10.0.0.5:8080", Token: "s3cret"}, ""},
		{"json", `{"hub":"http://h:1","token":"t"}`, client.AdminConfig{Hub: "http://h:1", Token: "t"}, ""},
		{"blanks trimmed", "hub: ' http://h:1 '\ntoken: ' t '\n", client.AdminConfig{Hub: "http://h:1", Token: "t"}, ""},
		{"unknown keys and contexts ignored", "ca: x\nhub: http://h:1\ntoken: t\ncontexts:\n- name: lab\n  hub: http://lab:1\n  token: u\n",
			client.AdminConfig{Hub: "http://h:1", Token: "t"}, ""},
		{"token only", "token: t\n", client.AdminConfig{Token: "t"}, ""},
		{"no token", "hub: http://h:1\n", client.AdminConfig{}, "no token"},
		{"empty", "\n", client.AdminConfig{}, "no token"},
		{"not a mapping", "- a\n- b\n", client.AdminConfig{}, "want a mapping"},
		{"not a string", "hub: [a]\ntoken: t\n", client.AdminConfig{}, "hub: want a string"},
		{"missing", "", client.AdminConfig{}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), client.AdminConfigName)
			if tt.content != "" {
				if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := client.ReadAdminConfig(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "read admin config") {
					t.Fatalf("err = %v, want one starting \"read admin config\" with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReadAdminConfig = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	_, err := client.ReadAdminConfig(filepath.Join(t.TempDir(), "none"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

// TestAdminConfigMarshal: the text is the one fleet-hub has always written,
// and both readers (the hub's and the CLI's) read it back.
func TestAdminConfigMarshal(t *testing.T) {
	c := client.AdminConfig{Hub: "http://127.0.0.1:8080", Token: "tok-123"}
	const want = "# Fleet hub admin client config, written by fleet-hub. Keep it secret:\n" +
		"# the token grants full control of the fleet.\nhub: http://127.0.0.1:8080\ntoken: tok-123\n"
	if got := string(c.Marshal()); got != want {
		t.Fatalf("Marshal:\n%s\nwant:\n%s", got, want)
	}
	path := client.AdminConfigPath(t.TempDir())
	if err := os.WriteFile(path, c.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := client.ReadAdminConfig(path); err != nil || got != c {
		t.Fatalf("ReadAdminConfig = %+v, %v; want %+v", got, err, c)
	}
	cfg, err := client.LoadConfigFile(path)
	if err != nil || cfg.Hub != c.Hub || cfg.Token != c.Token {
		t.Fatalf("LoadConfigFile = %v, %v; want %+v", cfg, err, c)
	}
}
