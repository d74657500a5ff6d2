package claimattach

import (
	"context"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
)

// These tests drive the plugin against a fake clientset; the integration
// test in pkg/apiserver shows the same rules over HTTP on a real server.

const ns = "team-a"

var deleted = ptr.To(metav1.Now())

// instance is a running Instance of h100 cards on Claim c.
func instance(name string, cards int32, mutate ...func(*gpu.Instance)) *gpu.Instance {
	inst := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "41"},
		Spec: gpu.InstanceSpec{
			Type: "h100", Image: "busybox:1", ClaimName: "c",
			Resources: gpu.InstanceResources{Accelerators: ptr.To(cards)},
		},
	}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

func stopped(i *gpu.Instance) { i.Spec.Stopped = true }

func deleting(i *gpu.Instance) { i.DeletionTimestamp = deleted }

func onClaim(name string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.ClaimName = name }
}

func partition(profile string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Resources.Accelerators, i.Spec.Resources.Partition = nil, profile }
}

// stored is the Instance as the server holds it, for the plugin to list.
func stored(i *gpu.Instance) *v1alpha1.Instance {
	out := &v1alpha1.Instance{}
	if err := v1alpha1.Convert_gpu_Instance_To_v1alpha1_Instance(i, out, nil); err != nil {
		panic(err)
	}
	return out
}

// claim is a stored Claim of h100 cards, or of a partition when profile
// is set.
func claim(name string, cards int32, profile string, phase v1alpha1.ClaimPhase) *v1alpha1.Claim {
	c := &v1alpha1.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.ClaimSpec{Type: "h100", Accelerators: ptr.To(cards)},
		Status:     v1alpha1.ClaimStatus{Phase: phase},
	}
	if profile != "" {
		c.Spec.Accelerators, c.Spec.Partition = nil, profile
	}
	return c
}

// internalClaim is a Claim as the registry hands it to admission.
func internalClaim(c *v1alpha1.Claim) *gpu.Claim {
	out := &gpu.Claim{}
	if err := v1alpha1.Convert_v1alpha1_Claim_To_gpu_Claim(c, out, nil); err != nil {
		panic(err)
	}
	return out
}

// attributes is a create of obj, an update when old is set, or a create
// of the subresource (a start or stop).
func attributes(obj, old runtime.Object, subresource string) admission.Attributes {
	op, opts := admission.Create, runtime.Object(&metav1.CreateOptions{})
	if old != nil {
		op, opts = admission.Update, &metav1.UpdateOptions{}
	}
	name := obj.(metav1.Object).GetName()
	return admission.NewAttributesRecord(obj, old, gpu.SchemeGroupVersion.WithKind("Instance"), ns, name,
		gpu.SchemeGroupVersion.WithResource("instances"), subresource, op, opts, false, &user.DefaultInfo{Name: "tenant-a"})
}

// deletion is the delete of a stored object, as the registry admits it:
// the object as the old one, no new one. name is "" in a deletecollection.
func deletion(resource, name string, old runtime.Object) admission.Attributes {
	return admission.NewAttributesRecord(nil, old, gpu.SchemeGroupVersion.WithKind("Claim"), ns, name,
		gpu.SchemeGroupVersion.WithResource(resource), "", admission.Delete, &metav1.DeleteOptions{}, false, &user.DefaultInfo{Name: "tenant-a"})
}

func newPlugin(t *testing.T, objects ...runtime.Object) (*Plugin, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	p := New()
	p.SetKilnClient(client)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p, client
}

// checkErr compares the status code, the message and, for a 422, the
// causes' fields.
func checkErr(t *testing.T, err error, wantCode int32, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		t.Fatalf("error %v, want a %d API error %q", err, wantCode, wantErr)
	}
	if code := status.Status().Code; code != wantCode || err.Error() != wantErr {
		t.Fatalf("error %d %q,\nwant  %d %q", code, err.Error(), wantCode, wantErr)
	}
	if wantCode == http.StatusUnprocessableEntity {
		causes := status.Status().Details.Causes
		if len(causes) != 1 || causes[0].Field != "spec.claimName" {
			t.Errorf("causes %+v, want one on spec.claimName", causes)
		}
	}
}

const stopA = `kubectl -n team-a patch instances.gpu.kiln.dev a --type=merge -p '{"spec":{"stopped":true}}'`

func TestValidateInstance(t *testing.T) {
	invalid := func(name, msg string) string { return `Instance.gpu.kiln.dev "` + name + `" is invalid: ` + msg }
	conflict := func(name, msg string) string {
		return `Operation cannot be fulfilled on instances.gpu.kiln.dev "` + name + `": ` + msg
	}
	cases := []struct {
		name   string
		claims []*v1alpha1.Claim
		// others are stored Instances of the namespace.
		others      []*gpu.Instance
		old, obj    *gpu.Instance
		subresource string
		wantCode    int32
		wantErr     string
	}{
		// Creates.
		{name: "an Instance on no Claim", obj: instance("b", 8, onClaim(""))},
		{name: "a stopped Instance on a missing Claim", obj: instance("b", 8, stopped)},
		{name: "two cards on a Claim of four", claims: []*v1alpha1.Claim{claim("c", 4, "", v1alpha1.ClaimBound)}, obj: instance("b", 2)},
		{name: "the partition a Lost Claim holds", claims: []*v1alpha1.Claim{claim("c", 0, "1g.10gb", v1alpha1.ClaimLost)},
			obj: instance("b", 0, partition("1g.10gb"))},
		{name: "a missing Claim", obj: instance("b", 1),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid("b", `spec.claimName: Not found: "c": no claim "c" in namespace "team-a"; create the Claim first, or remove spec.claimName`)},
		{name: "an Expired Claim", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimExpired)}, obj: instance("b", 1),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid("b", `spec.claimName: Invalid value: "c": claim "c" has expired and released its cards; delete it and create a new one, or remove spec.claimName`)},
		{name: "a Claim being deleted", claims: []*v1alpha1.Claim{func() *v1alpha1.Claim {
			c := claim("c", 1, "", v1alpha1.ClaimBound)
			c.DeletionTimestamp, c.Finalizers = deleted, []string{v1alpha1.ClaimFinalizer}
			return c
		}()}, obj: instance("b", 1),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid("b", `spec.claimName: Invalid value: "c": claim "c" is being deleted; create a new Claim, or remove spec.claimName`)},
		{name: "eight cards on a partition", claims: []*v1alpha1.Claim{claim("c", 0, "1g.10gb", v1alpha1.ClaimBound)}, obj: instance("b", 8),
			wantCode: http.StatusUnprocessableEntity,
			wantErr: invalid("b", `spec.claimName: Invalid value: "c": claim "c" holds 1 partition of 1g.10gb; an Instance of 8 accelerators does not fit `+
				`(a partition Claim lends no whole cards): ask for spec.resources.partition: 1g.10gb, or remove spec.claimName`)},
		{name: "another Instance runs on the Claim", claims: []*v1alpha1.Claim{claim("c", 4, "", v1alpha1.ClaimAttached)},
			others: []*gpu.Instance{instance("a", 1)}, obj: instance("b", 1),
			wantCode: http.StatusConflict,
			wantErr:  conflict("b", `claim "c" is in use by Instance "a", which is running; stop it first (`+stopA+`), or use another Claim`)},
		{name: "other Instances on the Claim are stopped or going", claims: []*v1alpha1.Claim{claim("c", 4, "", v1alpha1.ClaimBound)},
			others: []*gpu.Instance{instance("a", 1, stopped), instance("z", 1, deleting), instance("y", 1, onClaim("other"))},
			obj:    instance("b", 1)},

		// Updates and starts.
		{name: "an edit of a running Instance that keeps its request", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimAttached)},
			others: []*gpu.Instance{instance("a", 1)},
			old:    instance("b", 1), obj: instance("b", 1, func(i *gpu.Instance) { i.Spec.Image = "busybox:2" })},
		{name: "a stop", old: instance("b", 1), obj: instance("b", 1, stopped)},
		{name: "an update of an Instance being deleted", old: instance("b", 1, stopped), obj: instance("b", 1, deleting)},
		{name: "growing past the Claim", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimAttached)},
			old: instance("b", 1), obj: instance("b", 2),
			wantCode: http.StatusUnprocessableEntity,
			wantErr: invalid("b", `spec.claimName: Invalid value: "c": claim "c" holds 1 accelerator; an Instance of 2 accelerators does not fit `+
				`(more than the Claim holds): ask for at most 1 accelerator, use a larger Claim, or remove spec.claimName`)},
		{name: "a start by update while another runs", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimAttached)},
			others: []*gpu.Instance{instance("a", 1)},
			old:    instance("b", 1, stopped), obj: instance("b", 1),
			wantCode: http.StatusConflict,
			wantErr:  conflict("b", `claim "c" is in use by Instance "a", which is running; stop it first (`+stopA+`), or use another Claim`)},
		{name: "instances/start while another runs", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimAttached)},
			others: []*gpu.Instance{instance("a", 1)},
			old:    instance("b", 1, stopped), obj: instance("b", 1), subresource: "start",
			wantCode: http.StatusConflict,
			wantErr:  conflict("b", `claim "c" is in use by Instance "a", which is running; stop it first (`+stopA+`), or use another Claim`)},
		{name: "instances/start on an Expired Claim", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimExpired)},
			old: instance("b", 1, stopped), obj: instance("b", 1), subresource: "start",
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid("b", `spec.claimName: Invalid value: "c": claim "c" has expired and released its cards; delete it and create a new one, or remove spec.claimName`)},
		{name: "instances/start alone on its Claim", claims: []*v1alpha1.Claim{claim("c", 1, "", v1alpha1.ClaimBound)},
			others: []*gpu.Instance{instance("a", 1, stopped)},
			old:    instance("b", 1, stopped), obj: instance("b", 1), subresource: "start"},
		{name: "instances/stop", old: instance("b", 1), obj: instance("b", 1, stopped), subresource: "stop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var objects []runtime.Object
			for _, c := range tc.claims {
				objects = append(objects, c)
			}
			for _, i := range tc.others {
				objects = append(objects, stored(i))
			}
			if tc.old != nil {
				objects = append(objects, stored(tc.old))
			}
			p, _ := newPlugin(t, objects...)
			ctx, old := context.Background(), runtime.Object(nil)
			switch {
			case tc.subresource != "":
				// The registry passes the stored Instance of a start or
				// stop in the context, not as the old object.
				ctx = instancechange.WithStored(ctx, tc.old)
			case tc.old != nil:
				old = tc.old
			}
			checkErr(t, p.Validate(ctx, attributes(tc.obj, old, tc.subresource), nil), tc.wantCode, tc.wantErr)
		})
	}
}

func TestValidateClaimDelete(t *testing.T) {
	const wantErr = `Operation cannot be fulfilled on claims.gpu.kiln.dev "c": claim "c" is attached to Instance "a", which is running; stop it first (` +
		stopA + `), or delete that Instance`
	cases := []struct {
		name      string
		instances []*gpu.Instance
		// collection deletes through deletecollection: no name in the
		// attributes.
		collection bool
		wantCode   int32
		wantErr    string
	}{
		{name: "no Instance on it"},
		{name: "its Instance is stopped", instances: []*gpu.Instance{instance("a", 1, stopped)}},
		{name: "its Instance is being deleted", instances: []*gpu.Instance{instance("a", 1, deleting)}},
		{name: "a running Instance on another Claim", instances: []*gpu.Instance{instance("a", 1, onClaim("other"))}},
		{name: "its Instance runs", instances: []*gpu.Instance{instance("a", 1)},
			wantCode: http.StatusConflict, wantErr: wantErr},
		{name: "its Instance runs, in a deletecollection", instances: []*gpu.Instance{instance("a", 1)}, collection: true,
			wantCode: http.StatusConflict, wantErr: wantErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := claim("c", 1, "", v1alpha1.ClaimAttached)
			objects := []runtime.Object{c}
			for _, i := range tc.instances {
				objects = append(objects, stored(i))
			}
			p, _ := newPlugin(t, objects...)
			name := "c"
			if tc.collection {
				name = ""
			}
			checkErr(t, p.Validate(context.Background(), deletion("claims", name, internalClaim(c)), nil), tc.wantCode, tc.wantErr)
		})
	}
}

// Deletes of other things, and Claims' own writes, are not this plugin's.
func TestValidateIgnores(t *testing.T) {
	p, client := newPlugin(t, stored(instance("a", 1)))
	c := internalClaim(claim("c", 1, "", v1alpha1.ClaimAttached))
	for name, a := range map[string]admission.Attributes{
		"an Instance delete": deletion("instances", "a", instance("a", 1)),
		"a Claim create": admission.NewAttributesRecord(c, nil, gpu.SchemeGroupVersion.WithKind("Claim"), ns, "c",
			gpu.SchemeGroupVersion.WithResource("claims"), "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{}),
		"an Instance status write": attributes(instance("a", 1), instance("a", 1), "status"),
	} {
		t.Run(name, func(t *testing.T) {
			if err := p.Validate(context.Background(), a, nil); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d reads, want none", n)
	}
}

func TestValidateReadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, verb, resource string
		attrs                admission.Attributes
		wantErr              string
	}{
		{name: "reading the Claim", verb: "get", resource: "claims", attrs: attributes(instance("b", 1), nil, ""),
			wantErr: `Internal error occurred: reading claim "c": etcd is down`},
		{name: "listing the Instances", verb: "list", resource: "instances", attrs: attributes(instance("b", 1), nil, ""),
			wantErr: `Internal error occurred: listing the instances on claim "c": etcd is down`},
		{name: "listing the Instances of a deleted Claim", verb: "list", resource: "instances",
			attrs:   deletion("claims", "c", internalClaim(claim("c", 1, "", v1alpha1.ClaimBound))),
			wantErr: `Internal error occurred: listing the instances on claim "c": etcd is down`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, client := newPlugin(t, claim("c", 1, "", v1alpha1.ClaimBound))
			client.PrependReactor(tc.verb, tc.resource, func(core.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcd is down")
			})
			checkErr(t, p.Validate(context.Background(), tc.attrs, nil), http.StatusInternalServerError, tc.wantErr)
		})
	}
}
