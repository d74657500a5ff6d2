package install

import (
	"math/rand"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	gpufuzzer "kiln.dev/kiln/pkg/apis/gpu/fuzzer"
)

// TestRoundTripTypes: internal to v1alpha1 and back, through JSON and
// through protobuf, for every kind of the group.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripProtobufTestForAPIGroup(t, Install, gpufuzzer.Funcs)
}

// TestRoundTripExternalTypes: every v1alpha1 kind, as clients and etcd
// see it, through JSON and through protobuf. A kind without a protobuf
// encoding fails here rather than in a client that prefers protobuf.
func TestRoundTripExternalTypes(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	codecs := serializer.NewCodecFactory(scheme)
	f := fuzzer.FuzzerFor(fuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, gpufuzzer.Funcs), rand.NewSource(rand.Int63()), codecs)
	roundtrip.RoundTripExternalTypes(t, scheme, codecs, f, nil)
}
