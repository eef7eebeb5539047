package broker

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/fleetmq/fleet/schema"
)

// Running Fleet on Mosquitto 2 instead of the embedded broker: the hub
// connects with DialExternal as a RoleHub account; devices connect as usual.
// These functions render the password file, the ACL file (the same policy
// as Allowed) and a minimal mosquitto.conf. On SIGHUP Mosquitto rereads the
// password and ACL files and disconnects every client whose account was
// removed or whose password changed (verified with 2.0.11), which is how a
// rotated token stops working at once there.
//
// One difference with the embedded broker: Mosquitto's acl_file does not
// check SUBSCRIBE at all (a forbidden subscription gets SUBACK 0x01); it only
// filters deliveries by the read rules, so nothing forbidden arrives.

// Mosquitto 2's PBKDF2-SHA512 password hash parameters ("$7$" hashes), as
// written by mosquitto_passwd.
const (
	mosquittoHashIterations = 101
	mosquittoSaltLen        = 12
	mosquittoKeyLen         = 64
)

// MosquittoAccount is one account of a Mosquitto setup: a device (username
// = device name), the hub, or a monitor.
type MosquittoAccount struct {
	Identity
	Password string
}

// MosquittoPasswordHash returns the "$7$" (PBKDF2-SHA512) hash Mosquitto 2
// stores in its password file, as `mosquitto_passwd -b` would write it.
func MosquittoPasswordHash(password string) (string, error) {
	salt := make([]byte, mosquittoSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("mosquitto password hash: %w", err)
	}
	return mosquittoHash(password, salt, mosquittoHashIterations)
}

func mosquittoHash(password string, salt []byte, iterations int) (string, error) {
	key, err := pbkdf2.Key(sha512.New, password, salt, iterations, mosquittoKeyLen)
	if err != nil {
		return "", fmt.Errorf("mosquitto password hash: %w", err)
	}
	return "$7$" + strconv.Itoa(iterations) + "$" +
		base64.StdEncoding.EncodeToString(salt) + "$" +
		base64.StdEncoding.EncodeToString(key), nil
}

// checkMosquittoHash reports whether hash, a "$7$" hash from a Mosquitto
// password file, is the hash of password.
func checkMosquittoHash(hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 5 || parts[0] != "" || parts[1] != "7" {
		return false, errors.New("not a $7$ hash")
	}
	iterations, err := strconv.Atoi(parts[2])
	if err != nil || iterations < 1 {
		return false, fmt.Errorf("bad iteration count %q", parts[2])
	}
	salt, err := base64.StdEncoding.DecodeString(parts[3])
	if err != nil {
		return false, fmt.Errorf("bad salt: %w", err)
	}
	got, err := mosquittoHash(password, salt, iterations)
	if err != nil {
		return false, err
	}
	return got == hash, nil
}

// checkMosquittoUsername refuses names Mosquitto cannot store or that could
// widen an ACL pattern (%u substitution).
func checkMosquittoUsername(id Identity) error {
	switch {
	case id.Name == "":
		return errors.New("empty username")
	case len(id.Name) > 65535:
		return errors.New("username too long")
	case strings.ContainsAny(id.Name, ":+#/"):
		return fmt.Errorf("username %q: must not contain ':', '+', '#' or '/'", id.Name)
	case strings.IndexFunc(id.Name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("username %q: must not contain spaces or control characters", id.Name)
	}
	switch id.Role {
	case RoleDevice:
		if err := schema.ValidateName(id.Name); err != nil {
			return fmt.Errorf("device %q: %w", id.Name, err)
		}
	case RoleHub, RoleMonitor:
	case RoleBootstrap:
		if !strings.HasPrefix(id.Name, schema.BootstrapUsernamePrefix) {
			return fmt.Errorf("bootstrap account %q: its username must start with %q", id.Name, schema.BootstrapUsernamePrefix)
		}
	default:
		return fmt.Errorf("username %q: unknown role %v", id.Name, id.Role)
	}
	return nil
}

// MosquittoPasswordFile renders a Mosquitto 2 password file with freshly
// salted "$7$" hashes. Write it with mode 0600.
func MosquittoPasswordFile(accounts []MosquittoAccount) ([]byte, error) {
	var b bytes.Buffer
	seen := map[string]bool{}
	for _, a := range accounts {
		if err := checkMosquittoUsername(a.Identity); err != nil {
			return nil, fmt.Errorf("mosquitto password file: %w", err)
		}
		if seen[a.Name] {
			return nil, fmt.Errorf("mosquitto password file: duplicate username %q", a.Name)
		}
		seen[a.Name] = true
		if a.Password == "" {
			return nil, fmt.Errorf("mosquitto password file: %q: empty password", a.Name)
		}
		h, err := MosquittoPasswordHash(a.Password)
		if err != nil {
			return nil, fmt.Errorf("mosquitto password file: %w", err)
		}
		fmt.Fprintf(&b, "%s:%s\n", a.Name, h)
	}
	return b.Bytes(), nil
}

// MosquittoACLFile renders a Mosquitto ACL file implementing Allowed: device
// rights as patterns on the username (%u), which Mosquitto applies to every
// user; a readwrite-everything block per hub account; a read-only block per
// monitor account, which also denies the monitor the device patterns on its
// own name. Device accounts need no entry.
//
// With bootstrap accounts, the enrollment topics of the client's own ID
// (%c) are patterns too. Mosquitto applies patterns to every user, so any
// client may then send a request on, and read the answer of, its own
// client ID: harmless, since the hub checks the bootstrap token inside
// every request. Unlike the embedded broker, Mosquitto neither drops the
// retain flag of a request nor refuses a second client taking over a
// client ID (request IDs are random, 128 bits and more).
func MosquittoACLFile(topics schema.Topics, accounts []Identity) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Fleet MQTT access rules; generated, do not edit.\n")
	b.WriteString("# Devices (username = device name): own desired, requests and certificate in, own status/online/events/crashreports/responses/csr out.\n")
	fmt.Fprintf(&b, "pattern read %s\n", topics.Device("%u", schema.TopicDesired))
	fmt.Fprintf(&b, "pattern read %s\n", topics.Device("%u", schema.TopicRequests))
	fmt.Fprintf(&b, "pattern read %s\n", topics.Device("%u", schema.TopicCertificate))
	for _, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents, schema.TopicCrashReports, schema.TopicResponses, schema.TopicCSR} {
		fmt.Fprintf(&b, "pattern write %s\n", topics.Device("%u", kind))
	}
	for _, id := range accounts {
		if id.Role == RoleBootstrap {
			b.WriteString("# Bootstrap clients (client ID = enrollment request ID): own request out, own answer in.\n")
			fmt.Fprintf(&b, "pattern write %s\n", topics.Enroll("%c", schema.TopicEnrollRequest))
			fmt.Fprintf(&b, "pattern read %s\n", topics.Enroll("%c", schema.TopicEnrollResponse))
			break
		}
	}
	all := strings.TrimSuffix(topics.Device("x", "y"), "/devices/x/y") + "/#"
	seen := map[string]bool{}
	for _, id := range accounts {
		if err := checkMosquittoUsername(id); err != nil {
			return nil, fmt.Errorf("mosquitto ACL file: %w", err)
		}
		if seen[id.Name] {
			return nil, fmt.Errorf("mosquitto ACL file: duplicate username %q", id.Name)
		}
		seen[id.Name] = true
		switch id.Role {
		case RoleHub:
			fmt.Fprintf(&b, "\nuser %s\ntopic readwrite %s\n", id.Name, all)
			if ha, ok := HomeAssistantFilter(topics); ok {
				// Home Assistant discovery configs (--homeassistant-discovery).
				fmt.Fprintf(&b, "topic readwrite %s\n", ha)
			}
		case RoleMonitor:
			fmt.Fprintf(&b, "\nuser %s\n", id.Name)
			// Denials are checked before grants, patterns included.
			fmt.Fprintf(&b, "topic deny %s\n", topics.Device(id.Name, "#"))
			for _, f := range MonitorFilters(topics) {
				fmt.Fprintf(&b, "topic read %s\n", f)
			}
		}
	}
	return b.Bytes(), nil
}

// MosquittoConf is a minimal mosquitto.conf for Fleet.
type MosquittoConf struct {
	// Port and Bind of the single listener; Bind "" listens on all
	// addresses. Port is required.
	Port int
	Bind string
	// PasswordFile and ACLFile are absolute paths.
	PasswordFile string
	ACLFile      string
	// MaxPacketSize: clients sending a larger packet are disconnected.
	// Default DefaultMaxPacketSize.
	MaxPacketSize int
	// PersistenceDir, if set, turns persistence on (retained messages and
	// sessions survive a Mosquitto restart); otherwise "persistence false"
	// and the hub republishes desired state when it reconnects.
	PersistenceDir string
	// User is the account Mosquitto switches to when started as root
	// ("root" keeps root, e.g. in tests where the files belong to root).
	User string
}

// MosquittoConfFile renders c.
func MosquittoConfFile(c MosquittoConf) ([]byte, error) {
	if c.Port <= 0 || c.Port > 65535 {
		return nil, fmt.Errorf("mosquitto.conf: bad port %d", c.Port)
	}
	for _, p := range []string{c.PasswordFile, c.ACLFile, c.PersistenceDir} {
		if p != "" && (!filepath.IsAbs(p) || strings.ContainsAny(p, "\n\r")) {
			return nil, fmt.Errorf("mosquitto.conf: %q: want an absolute path", p)
		}
	}
	if c.PasswordFile == "" || c.ACLFile == "" {
		return nil, errors.New("mosquitto.conf: PasswordFile and ACLFile are required")
	}
	if strings.ContainsAny(c.Bind+c.User, " \t\n\r") {
		return nil, errors.New("mosquitto.conf: Bind and User must not contain spaces")
	}
	if c.MaxPacketSize <= 0 {
		c.MaxPacketSize = DefaultMaxPacketSize
	}
	var b bytes.Buffer
	b.WriteString("# Fleet mosquitto.conf; generated, do not edit.\n")
	b.WriteString("per_listener_settings false\n")
	b.WriteString("allow_anonymous false\n")
	fmt.Fprintf(&b, "password_file %s\n", c.PasswordFile)
	fmt.Fprintf(&b, "acl_file %s\n", c.ACLFile)
	fmt.Fprintf(&b, "max_packet_size %d\n", c.MaxPacketSize)
	// Mosquitto's default of 1,000 queued QoS 1 messages per client drops
	// status messages to the hub's single subscriber in a burst from a
	// large fleet (0, "no limit" in the documentation, breaks delivery on
	// Mosquitto 2.0.11); Nagle's algorithm adds tens of ms to every small
	// publish.
	b.WriteString("max_queued_messages 100000\n")
	b.WriteString("set_tcp_nodelay true\n")
	if c.PersistenceDir != "" {
		b.WriteString("persistence true\n")
		fmt.Fprintf(&b, "persistence_location %s/\n", strings.TrimSuffix(c.PersistenceDir, "/"))
	} else {
		b.WriteString("persistence false\n")
	}
	if c.User != "" {
		fmt.Fprintf(&b, "user %s\n", c.User)
	}
	b.WriteString("log_dest stderr\n")
	b.WriteString("log_type error\nlog_type warning\nlog_type notice\nlog_type information\n")
	if c.Bind != "" {
		fmt.Fprintf(&b, "listener %d %s\n", c.Port, c.Bind)
	} else {
		fmt.Fprintf(&b, "listener %d\n", c.Port)
	}
	return b.Bytes(), nil
}

// WriteMosquittoFiles writes passwd (mode 0600), acl and mosquitto.conf for
// accounts into dir, filling in conf's file paths, and returns the path of
// mosquitto.conf. Calling it again rewrites the password and ACL files; send
// Mosquitto SIGHUP to reload them.
func WriteMosquittoFiles(dir string, topics schema.Topics, accounts []MosquittoAccount, conf MosquittoConf) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("mosquitto files: %w", err)
	}
	ids := make([]Identity, len(accounts))
	for i, a := range accounts {
		ids[i] = a.Identity
	}
	pw, err := MosquittoPasswordFile(accounts)
	if err != nil {
		return "", err
	}
	acl, err := MosquittoACLFile(topics, ids)
	if err != nil {
		return "", err
	}
	conf.PasswordFile = filepath.Join(dir, "passwd")
	conf.ACLFile = filepath.Join(dir, "acl")
	cf, err := MosquittoConfFile(conf)
	if err != nil {
		return "", err
	}
	confPath := filepath.Join(dir, "mosquitto.conf")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{conf.PasswordFile, pw, 0o600},
		{conf.ACLFile, acl, 0o644},
		{confPath, cf, 0o644},
	} {
		if err := writeFileAtomic(f.path, f.data, f.mode); err != nil {
			return "", fmt.Errorf("mosquitto files: %w", err)
		}
	}
	return confPath, nil
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so Mosquitto never reads a half-written file on reload.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
