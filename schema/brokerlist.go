package schema

import (
	"fmt"
	"net/url"
	"strings"
)

// ParseBrokerList reads a list of broker URLs written as one string, the
// way --broker and install.sh take it: comma-separated, surrounding white
// space ignored ("ssl://h1:8883, ssl://h2:8883"). Each URL is checked by
// ParseBrokerURL; an error names the entry's position, counted from 1.
func ParseBrokerList(s string) ([]string, error) {
	var list []string
	for _, part := range strings.Split(s, ",") {
		list = append(list, strings.TrimSpace(part))
	}
	if _, err := CheckBrokerList(list); err != nil {
		return nil, err
	}
	return list, nil
}

// CheckBrokerList checks a list of broker URLs (the agent connects to
// them in this order, the preferred first) and returns them parsed, with
// default ports filled in. The list must hold at least one URL, none
// empty, none twice (after default ports are filled in), and none with
// credentials in it (the token is given apart). Errors name the entry's
// position, counted from 1, and never repeat a password.
func CheckBrokerList(list []string) ([]*url.URL, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("broker list: empty: want at least one broker URL such as ssl://hub.example:8883")
	}
	out := make([]*url.URL, 0, len(list))
	seen := map[string]int{}
	for i, s := range list {
		pos := fmt.Sprintf("broker %d of %d", i+1, len(list))
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("%s: empty (a stray comma?)", pos)
		}
		u, err := ParseBrokerURL(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pos, err)
		}
		if u.User != nil {
			return nil, fmt.Errorf("%s: %q carries credentials: give the token apart (--token-file)", pos, u.Redacted())
		}
		key := u.Scheme + "://" + strings.ToLower(u.Host)
		if j, dup := seen[key]; dup {
			return nil, fmt.Errorf("%s: %s is broker %d already", pos, u.Redacted(), j+1)
		}
		seen[key] = i
		out = append(out, u)
	}
	return out, nil
}
