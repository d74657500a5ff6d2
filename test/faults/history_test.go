package faults

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

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
			if got := l.classify(tt.err, "instances", "a").Outcome; got != tt.want {
				t.Errorf("classify = %v, want %v", got, tt.want)
			}
			if got := notSent(tt.err); got != tt.unsent {
				t.Errorf("notSent = %v, want %v", got, tt.unsent)
			}
		})
	}
}

// BenchmarkLinearizablePending times the checker on one object's history
// of 300 answered requests and n more that never answered, each pending
// to the end of the history, as a writer looping on a dead server leaves.
func BenchmarkLinearizablePending(b *testing.B) {
	for _, n := range []int{0, 200, 1000} {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			ops := pendingHistory(300, n)
			for b.Loop() {
				if got := porcupine.CheckOperationsTimeout(objectModel.ToModel(), ops, time.Minute); got != porcupine.Ok {
					b.Fatalf("check = %v, want Ok", got)
				}
			}
		})
	}
}

// pendingHistory is one writer's requests in turn, each answered as a
// store would, with n unanswered ones after the first hundred.
func pendingHistory(answered, n int) []porcupine.Operation {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []opKind{opGet, opCreate, opUpdate, opStop, opStart, opDelete}
	var ops []porcupine.Operation
	var now int64
	var st objState
	for i := range answered + n {
		in := opInput{Key: "instances/t/a", Kind: kinds[rng.IntN(len(kinds))], Value: fmt.Sprint(i)}
		if i >= 100 && i < 100+n {
			ops = append(ops, porcupine.Operation{Input: in, Call: now, Return: math.MaxInt64, Output: opOutput{Outcome: unknown}})
			now += 2
			continue
		}
		// A deleted object is gone by the next request.
		if st.Deleting {
			st = objState{}
		}
		var out opOutput
		next, applies := effect(st, in)
		switch {
		case in.Kind == opGet && st.Present:
			out = opOutput{Outcome: ok, Obj: st}
		case in.Kind == opGet || (!applies && !st.Present):
			out = opOutput{Outcome: notFound}
		case !applies:
			out = opOutput{Outcome: exists}
		default:
			st = next[0]
			out = opOutput{Outcome: ok, Obj: st}
		}
		ops = append(ops, porcupine.Operation{Input: in, Call: now, Return: now + 1, Output: out})
		now += 2
	}
	return ops
}
