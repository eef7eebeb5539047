package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// envPrefix starts the environment variable of every flag:
// --data-dir is FLEET_HUB_DATA_DIR.
const envPrefix = "FLEET_HUB_"

// envName is the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applySources fills every flag not given on the command line from its
// environment variable, else from the --config file: flag > env > file >
// default. It works for any flag, so new flags need no wiring.
func applySources(cmd *cobra.Command, getenv func(string) string) error {
	flags := cmd.Flags()
	path := getenv(envName("config"))
	if f := flags.Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	}
	file, err := readConfigFile(path, knownFlags(cmd.Root()))
	if err != nil {
		return err
	}
	var errs []error
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := flags.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", envName(f.Name), err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := flags.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("config %s: %s: %w", path, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// readConfigFile reads a YAML file whose keys are flag names. Unknown keys
// are errors, so a typo does not go unnoticed.
func readConfigFile(path string, known map[string]bool) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var raw map[string]any
	if err := yaml.UnmarshalStrict(b, &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		if !known[k] {
			return nil, fmt.Errorf("config %s: unknown key %q: keys are flag names (%s)", path, k, strings.Join(sortedKeys(known), ", "))
		}
		s, err := scalar(v)
		if err != nil {
			return nil, fmt.Errorf("config %s: %s: %w", path, k, err)
		}
		out[k] = s
	}
	return out, nil
}

// scalar renders a YAML value the way it would be typed as a flag value;
// a list becomes a comma-separated value.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("want a string, number, boolean or list, got %T", v)
}

// knownFlags collects the flag names of the whole command tree: one config
// file serves every subcommand.
func knownFlags(root *cobra.Command) map[string]bool {
	known := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	delete(known, "config")
	delete(known, "help")
	return known
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
