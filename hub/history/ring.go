package history

// ring keeps the max most recent values, oldest first. Its backing array
// grows (doubling, never past max) as values come, so a series that gets
// few samples takes little memory.
type ring[T any] struct {
	buf   []T
	start int // index of the oldest value once full
	max   int
}

func newRing[T any](max int) ring[T] { return ring[T]{max: max} }

// push adds v, dropping the oldest value when the ring is full.
func (r *ring[T]) push(v T) {
	if r.max <= 0 {
		return
	}
	if len(r.buf) < r.max {
		if len(r.buf) == cap(r.buf) {
			grown := make([]T, len(r.buf), min(max(2*cap(r.buf), 4), r.max))
			copy(grown, r.buf)
			r.buf = grown
		}
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.start] = v
	r.start = (r.start + 1) % len(r.buf)
}

// len is how many values the ring holds.
func (r *ring[T]) len() int { return len(r.buf) }

// at returns the i-th value, oldest first.
func (r *ring[T]) at(i int) *T { return &r.buf[(r.start+i)%len(r.buf)] }

// last returns the newest value, nil if none.
func (r *ring[T]) last() *T {
	if len(r.buf) == 0 {
		return nil
	}
	return r.at(len(r.buf) - 1)
}

// dropOldest drops the n oldest values.
func (r *ring[T]) dropOldest(n int) {
	if n <= 0 {
		return
	}
	if n >= len(r.buf) {
		r.buf, r.start = r.buf[:0], 0
		return
	}
	// Unroll into order, then cut: rare (only when samples age out).
	out := make([]T, 0, cap(r.buf))
	for i := n; i < len(r.buf); i++ {
		out = append(out, *r.at(i))
	}
	r.buf, r.start = out, 0
}
