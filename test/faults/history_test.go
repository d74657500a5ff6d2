package faults

import (
	"errors"
	"io"
	"math"
	"net"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/anishathalye/porcupine"
)

// TestObjectModel: the checker accepts what a store may do and refuses a
// lost write, a write that was refused yet took effect, and a resurrected
// object.
func TestObjectModel(t *testing.T) {
	const key = "instances/t/a"
	v := func(value string, stopped bool) objState {
		return objState{Present: true, Value: value, Stopped: stopped}
	}
	op := func(call, ret int64, kind opKind, value string, out outcome, obj objState) porcupine.Operation {
		return porcupine.Operation{Input: opInput{Key: key, Kind: kind, Value: value}, Call: call, Return: ret,
			Output: opOutput{Outcome: out, Obj: obj}}
	}
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"create then read", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 3, opGet, "", ok, v("1", false)),
		}, true},
		{"acknowledged update lost", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 3, opUpdate, "2", ok, v("2", false)),
			op(4, 5, opGet, "", ok, v("1", false)),
		}, false},
		{"concurrent updates either order", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 6, opUpdate, "2", ok, v("2", false)),
			op(3, 5, opUpdate, "3", ok, v("3", false)),
			op(7, 8, opGet, "", ok, v("2", false)),
		}, true},
		{"unknown create may land late", []porcupine.Operation{
			op(0, math.MaxInt64, opCreate, "1", unknown, objState{}),
			op(2, 3, opGet, "", notFound, objState{}),
			op(4, 5, opGet, "", ok, v("1", false)),
		}, true},
		{"refused update took effect", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 3, opUpdate, "2", refused, objState{}),
			op(4, 5, opGet, "", ok, v("2", false)),
		}, false},
		{"deleted object goes in its own time", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 3, opDelete, "", ok, objState{Present: true, Deleting: true, Value: "1"}),
			op(4, 5, opGet, "", ok, objState{Present: true, Deleting: true, Value: "1"}),
			op(6, 7, opGet, "", notFound, objState{}),
			op(8, 9, opCreate, "2", ok, v("2", false)),
		}, true},
		{"deleted object comes back", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 3, opDelete, "", ok, objState{}),
			op(4, 5, opGet, "", notFound, objState{}),
			op(6, 7, opGet, "", ok, v("1", false)),
		}, false},
		{"stop is kept", []porcupine.Operation{
			op(0, 1, opCreate, "1", ok, v("1", false)),
			op(2, 3, opStop, "", ok, v("1", true)),
			op(4, 5, opUpdate, "2", ok, v("2", true)),
			op(6, 7, opGet, "", ok, v("2", false)),
		}, false},
		{"already exists needs the object", []porcupine.Operation{
			op(0, 1, opCreate, "1", exists, objState{}),
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(objectModel.ToModel(), tt.ops); got != tt.want {
				t.Errorf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestClassify: only an answer that names the object says something about
// it, and only a request that never left says it did nothing.
func TestClassify(t *testing.T) {
	refusedDial := &url.Error{Op: "Post", URL: "https://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	brokenRead := &url.Error{Op: "Post", URL: "https://127.0.0.1:1", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
	gr := schema.GroupResource{Group: "gpu.kiln.dev", Resource: "instances"}
	tests := []struct {
		name   string
		err    error
		want   outcome
		unsent bool
	}{
		{"success", nil, ok, false},
		{"connection refused", refusedDial, refused, true},
		{"connection reset mid-request", brokenRead, unknown, false},
		{"end of stream", io.ErrUnexpectedEOF, unknown, false},
		{"server error", apierrors.NewInternalError(errors.New("boom")), unknown, false},
		{"timeout", apierrors.NewTimeoutError("slow", 1), unknown, false},
		{"not found, this object", apierrors.NewNotFound(gr, "a"), notFound, false},
		{"not found, another name", apierrors.NewNotFound(gr, "b"), refused, false},
		{"exists, this object", apierrors.NewAlreadyExists(gr, "a"), exists, false},
		{"over budget", apierrors.NewForbidden(gr, "a", errors.New("budget")), refused, false},
		{"conflict", apierrors.NewConflict(gr, "a", errors.New("changed")), refused, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &load{}
			got := l.classify(tt.err, "instances", "a")
			if got.Outcome != tt.want || got.unsent != tt.unsent {
				t.Errorf("classify = %v (unsent %v), want %v (unsent %v)", got.Outcome, got.unsent, tt.want, tt.unsent)
			}
		})
	}
}
