package apiserver

import (
	"io"
	"net"
	"strings"
	"testing"
)

func TestStandaloneRefusesNonLoopback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bind    string // "" leaves --bind-address unset
		servers []string
		wantErr string
	}{
		{name: "default binds loopback"},
		{name: "explicit loopback", bind: "127.0.0.1"},
		{name: "all interfaces", bind: "0.0.0.0", wantErr: "--bind-address=0.0.0.0: --standalone serves on 127.0.0.1 only"},
		{name: "another address", bind: "10.1.2.3", wantErr: "--bind-address=10.1.2.3"},
		{name: "external etcd", servers: []string{"http://127.0.0.1:2379"}, wantErr: "--etcd-servers: --standalone runs its own embedded etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions(io.Discard)
			o.Standalone.Enabled = true
			o.Standalone.DataDir = t.TempDir()
			if tc.bind != "" {
				o.RecommendedOptions.SecureServing.BindAddress = net.ParseIP(tc.bind)
			}
			o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList = tc.servers
			if err := o.Complete(tc.bind != "", false); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantErr == "" && o.RecommendedOptions.SecureServing.BindAddress.String() != "127.0.0.1" {
				t.Errorf("bound to %v", o.RecommendedOptions.SecureServing.BindAddress)
			}
		})
	}
}
