package hub

import (
	"strings"
	"testing"
)

// TestStoreOptions: --store picks Badger (default) or etcd, and bad values
// are refused naming the flag, before anything is created.
func TestStoreOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		etcd []string // endpoints; nil: Badger
		err  string
	}{
		{"default", Options{}, nil, ""},
		{"badger", Options{Store: "badger"}, nil, ""},
		{"etcd", Options{Store: "etcd://h1:2379,h2:2379,h3:2379"}, []string{"http://h1:2379", "http://h2:2379", "http://h3:2379"}, ""},
		{"etcd prefix", Options{Store: "etcd://h1:2379", EtcdPrefix: "/fleet/prod/"}, []string{"http://h1:2379"}, ""},
		{"unknown scheme", Options{Store: "consul://h1:8500"}, nil, "--store"},
		{"no port", Options{Store: "etcd://h1"}, nil, "want host:port"},
		{"empty endpoint", Options{Store: "etcd://h1:2379,,h2:2379"}, nil, "want host:port"},
		{"prefix without etcd", Options{EtcdPrefix: "/x/"}, nil, "need --store etcd"},
		{"bad prefix", Options{Store: "etcd://h1:2379", EtcdPrefix: "fleet"}, nil, "--etcd-prefix"},
		{"cert without key", Options{Store: "etcd://h1:2379", EtcdCertFile: "hub.crt"}, nil, "--etcd-key"},
		{"missing CA file", Options{Store: "etcd://h1:2379", EtcdCACertFile: "/nonexistent/ca.crt"}, nil, "--etcd-cacert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.setDefaults()
			so, err := tc.opts.storeOptions(nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
				if cerr := tc.opts.check(); cerr == nil {
					t.Fatal("check accepts what storeOptions refuses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.etcd == nil {
				if so.Etcd != nil || !strings.HasSuffix(so.Dir, "store") {
					t.Fatalf("want Badger in the data dir: %+v", so)
				}
				return
			}
			if so.Etcd == nil || strings.Join(so.Etcd.Endpoints, ",") != strings.Join(tc.etcd, ",") || so.Etcd.Prefix != tc.opts.EtcdPrefix {
				t.Fatalf("etcd options %+v, want endpoints %v", so.Etcd, tc.etcd)
			}
		})
	}
}
