package broker

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// somaxconnPath is where Linux keeps the most connections a listening
// socket may hold completed but not yet accepted.
const somaxconnPath = "/proc/sys/net/core/somaxconn"

// ListenBacklog returns the kernel's limit on a listener's queue of
// completed connections not yet accepted (net.core.somaxconn on Linux).
// Go's listeners ask for the kernel's maximum, so this is the broker's
// queue. When more devices than that reconnect at once (a hub restart),
// the connections that do not fit are dropped and each device's TCP stack
// retries after a second or more. It returns an error where the limit
// cannot be read (other systems).
func ListenBacklog() (int, error) {
	return readBacklog(somaxconnPath)
}

func readBacklog(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the listen backlog limit: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("read the listen backlog limit: %s: %q is not a positive number", path, strings.TrimSpace(string(b)))
	}
	return n, nil
}
