// Package faults is Kiln's fault suite: it kills the components of a real
// local cluster under a logged writer load and checks what the tenants were
// promised (issue J). `make faults` runs it and prints its table.
package faults

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// opKind is what a load client asked of one object.
type opKind string

const (
	opCreate opKind = "create"
	opUpdate opKind = "update" // a merge patch of the value annotation
	opStop   opKind = "stop"
	opStart  opKind = "start"
	opDelete opKind = "delete"
	opGet    opKind = "get"
)

// outcome is how the server answered, as far as it bears on the object.
type outcome int

const (
	// ok: the write took effect (or the read saw obj).
	ok outcome = iota
	// notFound and exists are the refusals that say something about the
	// object: it was absent, or present.
	notFound
	exists
	// refused: any other 4xx. The request did nothing, and says nothing
	// about the object (a Budget's 403, a 409, a 429 from APF, a 404 or
	// 503 of an aggregator that did not reach Kiln).
	refused
	// unknown: a 5xx, a timeout, a broken connection. The write may or
	// may not have taken effect, at any time after it was sent.
	unknown
)

func (o outcome) String() string {
	return [...]string{"ok", "notFound", "exists", "refused", "unknown"}[o]
}

// objState is one object as the model and the clients see it: whether it
// is stored, whether its deletion has begun (a finalizer holds it), the
// value annotation the load writes and spec.stopped.
type objState struct {
	Present, Deleting bool
	Value             string
	Stopped           bool
}

type opInput struct {
	Key   string // resource/namespace/name
	Kind  opKind
	Value string // what create and update write
}

type opOutput struct {
	Outcome outcome
	// Obj is what the server returned with ok: the object after a write,
	// or what a get read.
	Obj objState
}

// history collects the operations of every load client, with call and
// return times on one monotonic clock, as porcupine wants them.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// add records one operation. One of unknown outcome may take effect at any
// time after its call, so its return is put past the end of the history.
func (h *history) add(client int, in opInput, call int64, out opOutput) {
	ret := h.now()
	if out.Outcome == unknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// objectModel is a register per object with existence, deletion and a
// stop flag. Deletion is the one nondeterministic step: a delete that
// succeeds leaves the object Deleting while a finalizer holds it, and the
// controller may remove it at any moment after, which no client sees
// happen; so every step may first take a Deleting object away.
var objectModel = porcupine.NondeterministicModel{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range ops {
			k := op.Input.(opInput).Key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() []any { return []any{objState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(objState), input.(opInput), output.(opOutput)
		var next []any
		for _, c := range settle(s) {
			for _, n := range step(c, in, out) {
				next = append(next, n)
			}
		}
		return next
	},
	Equal: func(a, b any) bool { return a.(objState) == b.(objState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(opInput), output.(opOutput)
		return fmt.Sprintf("%s %s(%q) -> %s %+v", in.Key, in.Kind, in.Value, out.Outcome, out.Obj)
	},
}

// settle is what a state may have become before the next request: a
// Deleting object may be gone.
func settle(s objState) []objState {
	if s.Present && s.Deleting {
		return []objState{s, {}}
	}
	return []objState{s}
}

// step is what op does to state c, given how the server answered; none if
// that answer is impossible from c.
func step(c objState, in opInput, out opOutput) []objState {
	applied, applies := effect(c, in)
	switch out.Outcome {
	case unknown:
		if applies {
			return append([]objState{c}, applied...)
		}
		return []objState{c}
	case refused:
		return []objState{c}
	case notFound:
		if c.Present {
			return nil
		}
		return []objState{c}
	case exists:
		if in.Kind != opCreate || !c.Present {
			return nil
		}
		return []objState{c}
	}
	// ok
	if in.Kind == opGet {
		if !c.Present || out.Obj != c {
			return nil
		}
		return []objState{c}
	}
	if !applies {
		return nil
	}
	var next []objState
	for _, a := range applied {
		// What the write returned is the object it left; a delete that
		// removed it at once answers with a Status, not the object.
		if out.Obj == a || (in.Kind == opDelete && out.Obj == objState{}) {
			next = append(next, a)
		}
	}
	return next
}

// effect is what op does to c when it takes effect; applies is false when
// it cannot (a create of a present object, a write to an absent one).
func effect(c objState, in opInput) (_ []objState, applies bool) {
	switch in.Kind {
	case opCreate:
		if c.Present {
			return nil, false
		}
		return []objState{{Present: true, Value: in.Value}}, true
	case opGet:
		return nil, false
	}
	if !c.Present {
		return nil, false
	}
	n := c
	switch in.Kind {
	case opUpdate:
		n.Value = in.Value
	case opStop:
		n.Stopped = true
	case opStart:
		n.Stopped = false
	case opDelete:
		// Held by a finalizer, or gone at once.
		n.Deleting = true
		return []objState{n, {}}, true
	}
	return []objState{n}, true
}

// linearizable checks the history per object. It returns the keys whose
// operations no linear order explains (with porcupine's verdict), and
// those porcupine ran out of time on.
func (h *history) linearizable(timeout time.Duration) (illegal, undecided []string) {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	model := objectModel.ToModel()
	for _, part := range model.Partition(ops) {
		switch porcupine.CheckOperationsTimeout(model, part, timeout) {
		case porcupine.Illegal:
			illegal = append(illegal, part[0].Input.(opInput).Key)
		case porcupine.Unknown:
			undecided = append(undecided, part[0].Input.(opInput).Key)
		}
	}
	return illegal, undecided
}

// writesByKey counts the history's acknowledged writes per key.
func (h *history) writesByKey() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		if in.Kind != opGet && out.Outcome == ok {
			n[in.Key]++
		}
	}
	return n
}

// unknownByKey counts, per key, the requests whose outcome is unknown: each
// stays pending to the end of the history, and they are what makes a
// history hard to order.
func (h *history) unknownByKey() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := map[string]int{}
	for _, op := range h.ops {
		if op.Output.(opOutput).Outcome == unknown {
			n[op.Input.(opInput).Key]++
		}
	}
	return n
}
