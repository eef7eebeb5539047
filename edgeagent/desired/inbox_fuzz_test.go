package desired

import (
	"encoding/binary"
	"sync"
	"testing"
)

// offer is one desired-state payload of a fuzzed sequence.
type offer struct {
	device, store string
	gen           int64
}

// offers decodes a fuzzed byte string into a sequence of at most 16
// payloads: per 9 bytes, a byte choosing the device and the store and a
// generation.
func offers(b []byte) []offer {
	var out []offer
	for len(b) >= 9 && len(out) < 16 {
		o := offer{device: "dev1", store: "s1", gen: int64(binary.BigEndian.Uint64(b[1:9]))}
		if b[0]&1 != 0 {
			o.device = "dev2"
		}
		if b[0]&2 != 0 {
			o.store = "s2"
		}
		if b[0]&4 != 0 {
			o.gen %= 8 // small generations collide more often
		}
		out = append(out, o)
		b = b[9:]
	}
	return out
}

// FuzzOfferSequence: over any sequence of desired states, the inbox
// accepts exactly the valid ones for its device that are newer than the
// latest of their store (or from another store), its latest generation
// within a store never goes backwards, and Take hands over the last one
// accepted. Offered from many goroutines at once, the newest generation
// wins.
func FuzzOfferSequence(f *testing.F) {
	seq := func(items ...offer) []byte {
		var b []byte
		for _, o := range items {
			var flags byte
			if o.device == "dev2" {
				flags |= 1
			}
			if o.store == "s2" {
				flags |= 2
			}
			b = binary.BigEndian.AppendUint64(append(b, flags), uint64(o.gen))
		}
		return b
	}
	f.Add(seq(offer{"dev1", "s1", 6}, offer{"dev1", "s1", 7}, offer{"dev1", "s1", 3}, offer{"dev1", "s2", 1}, offer{"dev2", "s1", 9}))
	f.Add(seq(offer{"dev1", "s1", 5}, offer{"dev1", "s1", 0}, offer{"dev1", "s1", -1}, offer{"dev1", "s1", 1 << 62}))
	f.Add(seq(offer{"dev1", "s2", 2}, offer{"dev1", "s1", 8}, offer{"dev1", "s2", 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		items := offers(b)
		in := New("dev1", nil)
		store, gen, have := "", int64(0), false
		var last []byte
		for _, o := range items {
			p := payload(t, o.device, o.store, o.gen)
			out, _, err := in.Offer(p)
			valid := o.device == "dev1" && o.gen >= 1
			newer := !have || o.store != store || o.gen > gen
			if want := valid && newer; (out == Accepted) != want {
				t.Fatalf("after %s gen %d, offer %+v: %v (%v), want accepted %v", store, gen, o, out, err, want)
			}
			if out == Accepted {
				store, gen, have = o.store, o.gen, true
				last = p
			}
			if s, g, ok := in.Latest(); ok != have || s != store || g != gen {
				t.Fatalf("Latest = %s %d %v, want %s %d %v", s, g, ok, store, gen, have)
			}
		}
		ds, raw, ok := in.Take()
		if ok != (last != nil) || ok && (string(raw) != string(last) || ds.Generation != gen || ds.Store != store) {
			t.Fatalf("Take = %+v, %v; want the last accepted state (%s %d)", ds, ok, store, gen)
		}

		// The same payloads of one store, all at once.
		in = New("dev1", nil)
		var newest int64
		var wg sync.WaitGroup
		for _, o := range items {
			if o.device != "dev1" || o.store != "s1" || o.gen < 1 {
				continue
			}
			newest = max(newest, o.gen)
			p := payload(t, o.device, o.store, o.gen)
			wg.Go(func() { _, _, _ = in.Offer(p) })
		}
		wg.Wait()
		if _, g, ok := in.Latest(); newest > 0 && (!ok || g != newest) {
			t.Fatalf("offered at once, generations up to %d: Latest = %d, %v", newest, g, ok)
		}
		if ds, _, ok := in.Take(); newest > 0 && (!ok || ds.Generation != newest) {
			t.Fatalf("offered at once, generations up to %d: Take = %+v, %v", newest, ds, ok)
		}
	})
}
