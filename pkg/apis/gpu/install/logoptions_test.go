package install

import (
	"net/url"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// TestDecodeInstanceLogOptions decodes the query of instances/log the way
// the server's GET handler does: url.Values to v1alpha1, then to internal.
func TestDecodeInstanceLogOptions(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	codec := runtime.NewParameterCodec(scheme)

	cases := []struct {
		name    string
		query   string
		want    gpu.InstanceLogOptions
		wantErr bool
	}{
		{name: "no parameters"},
		{name: "every parameter",
			query: "container=ssh&follow=true&previous=1&timestamps=true&sinceSeconds=30&tailLines=100&limitBytes=4096",
			want: gpu.InstanceLogOptions{
				Container: "ssh", Follow: true, Previous: true, Timestamps: true,
				SinceSeconds: ptr.To[int64](30), TailLines: ptr.To[int64](100), LimitBytes: ptr.To[int64](4096),
			}},
		{name: "follow=false", query: "follow=false&tailLines=0",
			want: gpu.InstanceLogOptions{TailLines: ptr.To[int64](0)}},
		{name: "unknown parameters are ignored", query: "pretty=true&insecureSkipTLSVerifyBackend=true",
			want: gpu.InstanceLogOptions{}},
		{name: "tailLines not a number", query: "tailLines=ten", wantErr: true},
		// As for pods/log: anything but "false", "0" or empty is true.
		{name: "bools read as kube reads them", query: "follow=yes&previous=0",
			want: gpu.InstanceLogOptions{Follow: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			values, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			var got gpu.InstanceLogOptions
			err = codec.DecodeParameters(values, v1alpha1.SchemeGroupVersion, &got)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("decoded %q into %+v, want an error", tc.query, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("decoded %q into %+v, want %+v", tc.query, got, tc.want)
			}
		})
	}
}

// TestEncodeInstanceLogOptions: what a client sends decodes to what it meant.
func TestEncodeInstanceLogOptions(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	codec := runtime.NewParameterCodec(scheme)
	in := &v1alpha1.InstanceLogOptions{Follow: true, TailLines: ptr.To[int64](5)}
	values, err := codec.EncodeParameters(in, v1alpha1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if got := values.Encode(); got != "follow=true&tailLines=5" {
		t.Errorf("encoded %q, want follow=true&tailLines=5", got)
	}
}
