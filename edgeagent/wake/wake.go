// Package wake holds the agent's wake-up signal: a channel of capacity
// one that a loop selects on, which any number of signals fill at most
// once. Signals that arrive before the loop looks collapse into one wake,
// and signalling never blocks; the loop then reads the whole state (a
// level, not a count of events), so a collapsed signal loses nothing.
package wake

// New returns a wake channel: capacity one.
func New() chan struct{} { return make(chan struct{}, 1) }

// Signal fills c if it is empty and returns at once either way.
func Signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
