package hub

import "testing"

// TestMosquittoSyncOptions: the flags are refused where they cannot work.
func TestMosquittoSyncOptions(t *testing.T) {
	for _, o := range []Options{
		{MosquittoPIDFile: "/run/mosquitto.pid"},
		{MosquittoConfigDir: t.TempDir()},
	} {
		h := &Hub{opts: o}
		if err := h.setupMosquittoSync(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
