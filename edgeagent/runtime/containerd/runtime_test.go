package containerd

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestKeyedMutex(t *testing.T) {
	var k keyedMutex
	var inside [2]atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			unlock := k.lock(key)
			if n := inside[i%2].Add(1); n != 1 {
				t.Errorf("%d holders of %s", n, key)
			}
			inside[i%2].Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if len(k.m) != 0 {
		t.Errorf("%d entries left", len(k.m))
	}
}

func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.ensureDefaults()
	if o.Socket != DefaultSocket || o.Namespace != DefaultNamespace || o.Snapshotter != DefaultSnapshotter ||
		o.Logger == nil || o.LogMaxBytes != DefaultLogMaxBytes || o.RemoveTimeout != DefaultRemoveTimeout {
		t.Errorf("defaults: %+v", o)
	}
	o = Options{LogMaxBytes: -1}
	o.ensureDefaults()
	if o.LogMaxBytes != -1 {
		t.Error("negative LogMaxBytes (rotation off) overwritten")
	}
}
