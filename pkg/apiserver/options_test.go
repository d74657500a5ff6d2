package apiserver

import (
	"io"
	"net"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"

	"kiln.dev/kiln/pkg/apis/gpu"
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

// TestKubeComponentVersion: whatever gitVersion make stamps, the kube
// component is Kubernetes at the libraries' release, and validates.
func TestKubeComponentVersion(t *testing.T) {
	kube := utilversion.MustParse(baseversion.DefaultKubeBinaryVersion)
	for _, tc := range []struct {
		name       string
		registered basecompatibility.MutableEffectiveVersion // nil: nothing registered
	}{
		{name: "nothing registered"},
		{name: "registered from Kiln's v0.1 gitVersion", registered: basecompatibility.NewEffectiveVersion(
			utilversion.MustParse("v0.1.0-g1dd2a0e1d84e"), false, utilversion.MajorMinor(1, 34), utilversion.MajorMinor(1, 34))},
		{name: "registered at the libraries' release", registered: basecompatibility.NewEffectiveVersionFromString(
			baseversion.DefaultKubeBinaryVersion, "", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := basecompatibility.NewComponentGlobalsRegistry()
			if tc.registered != nil {
				// As k8s.io/apiserver registers it at init.
				if err := r.Register(basecompatibility.DefaultKubeComponent, tc.registered, utilfeature.DefaultMutableFeatureGate); err != nil {
					t.Fatal(err)
				}
			}
			registerKubeComponent(r)
			v := r.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)
			if v == nil || !v.BinaryVersion().EqualTo(kube) || !v.EmulationVersion().EqualTo(kube.WithPatch(0)) {
				t.Fatalf("kube component %v, want binary and emulation version %s", v, kube)
			}
			if errs := r.Validate(); len(errs) != 0 {
				t.Errorf("validation: %v", errs)
			}
			if r.FeatureGateFor(basecompatibility.DefaultKubeComponent) != utilfeature.DefaultMutableFeatureGate {
				t.Error("the kube component's feature gate is not k8s.io/apiserver's")
			}
		})
	}
}

// TestStorageCodec: etcd's objects are written in --storage-media-type,
// protobuf by default, and whatever it is, objects written in any of the
// three encodings read, so a change of encoding needs no migration.
func TestStorageCodec(t *testing.T) {
	in := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "team"},
		Spec:       gpu.InstanceSpec{Type: "h100", Image: "python:3.12"},
	}
	writers := []struct {
		name, mediaType string
		wantPrefix      string
	}{
		{"default", "", "k8s\x00"},
		{"protobuf", runtime.ContentTypeProtobuf, "k8s\x00"},
		{"json", runtime.ContentTypeJSON, `{"kind":"Instance","apiVersion":"gpu.kiln.dev/v1alpha1"`},
		{"yaml", runtime.ContentTypeYAML, "apiVersion: gpu.kiln.dev/v1alpha1\n"},
	}
	codecs := map[string]runtime.Codec{}
	stored := map[string][]byte{}
	for _, w := range writers {
		o := NewOptions(io.Discard)
		if w.mediaType != "" {
			o.RecommendedOptions.Etcd.DefaultStorageMediaType = w.mediaType
		}
		if err := applyStorageCodec(o.RecommendedOptions.Etcd); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		codec := o.RecommendedOptions.Etcd.StorageConfig.Codec
		data, err := runtime.Encode(codec, in)
		if err != nil {
			t.Fatalf("%s: encoding: %v", w.name, err)
		}
		if !strings.HasPrefix(string(data), w.wantPrefix) {
			t.Errorf("%s writes %.40q, want it to start with %q", w.name, data, w.wantPrefix)
		}
		codecs[w.name], stored[w.name] = codec, data
	}
	for _, r := range writers {
		for _, w := range writers {
			t.Run(r.name+" reads "+w.name, func(t *testing.T) {
				obj, err := runtime.Decode(codecs[r.name], stored[w.name])
				if err != nil {
					t.Fatal(err)
				}
				got, ok := obj.(*gpu.Instance)
				if !ok || got.Name != in.Name || got.Namespace != in.Namespace || got.Spec.Image != in.Spec.Image {
					t.Errorf("decoded %#v", obj)
				}
			})
		}
	}

	o := NewOptions(io.Discard)
	o.RecommendedOptions.Etcd.DefaultStorageMediaType = "text/plain"
	if err := applyStorageCodec(o.RecommendedOptions.Etcd); err == nil || !strings.Contains(err.Error(), "--storage-media-type=text/plain") {
		t.Errorf("--storage-media-type=text/plain: error %v, want one naming the flag", err)
	}
}
