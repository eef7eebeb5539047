package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// readJoin reads --join: a join string, or @FILE holding one.
func readJoin(arg string) (schema.JoinInfo, error) {
	if path, ok := strings.CutPrefix(arg, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return schema.JoinInfo{}, fmt.Errorf("--join: %w", err)
		}
		arg = string(b)
	}
	j, err := schema.ParseJoin(arg)
	if err != nil {
		return schema.JoinInfo{}, fmt.Errorf("--join: %w", err)
	}
	return j, nil
}

// applyJoin fills the settings a join string carries. A setting given
// too (flag, environment or config file) must agree with it: two
// sources that disagree about whom to trust are a mistake to stop at,
// not one to resolve by precedence.
func (c *config) applyJoin(fs *pflag.FlagSet) error {
	if c.Join == "" {
		return nil
	}
	j, err := readJoin(c.Join)
	if err != nil {
		return err
	}
	set := func(name string) bool { return fs.Changed(name) }
	var errs []error
	disagree := func(flag, why string) {
		errs = append(errs, fmt.Errorf("--%s disagrees with --join: %s", flag, why))
	}
	if set("broker") {
		// A subset of the join string's brokers, in any order: the
		// operator may prefer the hub nearest the device.
		given, _ := c.brokers() // checked by resolve
		for _, g := range given {
			if !slices.ContainsFunc(j.Brokers, func(b string) bool { return sameBroker(b, g) }) {
				disagree("broker", fmt.Sprintf("%s is not one of its brokers (%s)", g, strings.Join(j.Brokers, ", ")))
			}
		}
	} else {
		c.Broker = brokerList(strings.Join(j.Brokers, ","))
	}
	if j.CAHash != "" {
		if set("ca-hash") {
			if h, err := schema.ParseCAHash(c.CAHash); err != nil || h != j.CAHash {
				disagree("ca-hash", fmt.Sprintf("it pins the hub's CA %s", j.CAHash))
			}
		} else {
			c.CAHash = j.CAHash
		}
	}
	key, _ := j.Key() // validated by ParseJoin
	if set("hub-signing-key") {
		if k, err := trust.ReadKeyArg(c.HubSigningKey); err != nil || !k.Equal(key) {
			disagree("hub-signing-key", fmt.Sprintf("it pins the hub's signing key %s", schema.SigningKeyID(key)))
		}
	} else {
		c.HubSigningKey = j.SigningKey
	}
	if j.Device != "" {
		if set("device") && c.Device != j.Device {
			disagree("device", fmt.Sprintf("it is for device %s", j.Device))
		} else {
			c.Device = j.Device
		}
	}
	if j.Token != "" {
		errs = append(errs, c.joinSecret(set, "token", "token-file", j.Token, &c.Token, c.TokenFile)...)
		if set("bootstrap-token") || set("bootstrap-token-file") {
			disagree("bootstrap-token", "it carries a device token")
		}
	}
	if j.BootstrapToken != "" {
		errs = append(errs, c.joinSecret(set, "bootstrap-token", "bootstrap-token-file", j.BootstrapToken, &c.BootstrapToken, c.BootstrapTokenFile)...)
		if set("token") || set("token-file") {
			disagree("token", "it carries a bootstrap token")
		}
	}
	return errors.Join(errs...)
}

// joinSecret fills a token from the join string unless the flag or its
// file flag gives it, in which case they must hold the same token. The
// errors never show a token.
func (c *config) joinSecret(set func(string) bool, flag, fileFlag, want string, dst *string, file string) []error {
	switch {
	case set(flag):
		if strings.TrimSpace(*dst) != want {
			return []error{fmt.Errorf("--%s disagrees with --join: they hold different tokens", flag)}
		}
	case set(fileFlag):
		b, err := os.ReadFile(file)
		if err != nil {
			return []error{fmt.Errorf("--%s: %w", fileFlag, err)}
		}
		if strings.TrimSpace(string(b)) != want {
			return []error{fmt.Errorf("--%s disagrees with --join: %s holds another token", fileFlag, file)}
		}
	default:
		*dst = want
	}
	return nil
}

// sameBroker reports whether two broker URLs name the same broker.
func sameBroker(a, b string) bool {
	ua, errA := schema.ParseBrokerURL(a)
	ub, errB := schema.ParseBrokerURL(b)
	return errA == nil && errB == nil && ua.Scheme == ub.Scheme && strings.EqualFold(ua.Host, ub.Host)
}
