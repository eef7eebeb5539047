package printers

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

var credentialHeaders = []string{"NAME", "ROLE"}

// PrintCredentials prints credentials (names and roles: the hub never
// returns tokens in a list): a NAME ROLE table, role/name lines, or a
// CredentialList in json and yaml. A table of none prints nothing.
func (p *Printer) PrintCredentials(items []schema.Credential) error {
	if items == nil {
		items = []schema.Credential{}
	}
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, schema.CredentialList{Items: items})
	case YAML:
		return writeYAML(p.Out, schema.CredentialList{Items: items})
	case Name:
		for _, c := range items {
			if _, err := fmt.Fprintf(p.Out, "%s/%s\n", c.Role, c.Name); err != nil {
				return err
			}
		}
		return nil
	}
	if len(items) == 0 {
		return nil
	}
	rows := make([][]string, len(items))
	for i, c := range items {
		rows[i] = []string{c.Name, orNone(c.Role)}
	}
	var h []string
	if !p.NoHeaders {
		h = credentialHeaders
	}
	return WriteTable(p.Out, h, rows)
}

// WriteSecret writes a freshly issued credential (schema.DeviceCredentials,
// schema.Credential) for a script: json on one line, exactly the object and
// a newline, or yaml.
func WriteSecret(w io.Writer, f Format, v any) error {
	switch f {
	case JSON:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case YAML:
		return writeYAML(w, v)
	}
	return fmt.Errorf("output format %q: a token is printed as json or yaml", f)
}

// AgentTokenFile is where the agent command line printed by `fleet device
// add` expects the token.
const AgentTokenFile = "/etc/fleet/token"

// TokenBanner is the line that shows a token, the one time it is shown.
func TokenBanner(token string) string {
	return "Token (shown once, store it safely): " + token
}

// AgentCommand is the fleet-agent command line of a device whose token is
// in AgentTokenFile.
func AgentCommand(brokerURL, device string) string {
	return fmt.Sprintf("fleet-agent --broker %s --device %s --token-file %s", shellWord(brokerURL), shellWord(device), AgentTokenFile)
}

// MosquittoSubCommand is a mosquitto_sub command line that reads topic
// with a monitor credential, whose token it expects in $TOKEN (so the
// token is not written into the shell's history). caFile is added for a
// TLS broker.
func MosquittoSubCommand(host, port, user, topic string, tls bool) string {
	ca := ""
	if tls {
		ca = " --cafile ca.pem"
	}
	return fmt.Sprintf(`mosquitto_sub -h %s -p %s%s -u %s -P "$TOKEN" -t %s -v`, shellWord(host), shellWord(port), ca, shellWord(user), shellWord(topic))
}

// shellWord quotes s for a POSIX shell unless it needs no quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@=,%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
