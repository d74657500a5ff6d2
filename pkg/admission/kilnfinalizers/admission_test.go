package kilnfinalizers

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestValidateInitialization(t *testing.T) {
	p := New()
	if err := p.ValidateInitialization(); err == nil || err.Error() != "KilnFinalizers needs an authorizer" {
		t.Errorf("error %v", err)
	}
}

// allowFinalizers lets only kiln-controller update */finalizers, and
// records what it was asked.
func allowFinalizers(asked *[]authorizer.Attributes) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		*asked = append(*asked, a)
		if a.GetUser().GetName() == "system:serviceaccount:kiln-system:kiln-controller" && a.GetVerb() == "update" && a.GetSubresource() == "finalizers" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func TestValidate(t *testing.T) {
	const tenant, controller = "tenant-a", "system:serviceaccount:kiln-system:kiln-controller"
	instance := func(finalizers ...string) runtime.Object {
		return &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", Finalizers: finalizers}}
	}
	claim := func(finalizers ...string) runtime.Object {
		return &gpu.Claim{ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: "team-a", Finalizers: finalizers}}
	}
	for _, tc := range []struct {
		name        string
		resource    string
		subresource string
		old, obj    runtime.Object
		user        string
		wantAsked   bool
		wantErr     string
	}{
		{name: "a tenant removing the Instance finalizer", resource: "instances", user: tenant,
			old: instance(gpu.InstanceFinalizer, "team/keep"), obj: instance("team/keep"), wantAsked: true,
			wantErr: `instances.gpu.kiln.dev "train" is forbidden: metadata.finalizers: removing gpu.kiln.dev/instance-controller needs "update" on instances/finalizers, which user "tenant-a" does not have; kiln-controller removes it once the Instance's Pod and Service are gone: delete the object and wait`},
		{name: "a tenant removing the Claim finalizer", resource: "claims", user: tenant,
			old: claim(gpu.ClaimFinalizer), obj: claim(), wantAsked: true,
			wantErr: `claims.gpu.kiln.dev "hold" is forbidden: metadata.finalizers: removing gpu.kiln.dev/claim needs "update" on claims/finalizers, which user "tenant-a" does not have; kiln-controller removes it once the Claim's holder Pod is gone and no Instance runs on it: delete the object and wait`},
		{name: "a tenant removing the ledger's finalizer", resource: "instances", user: tenant,
			old: instance(gpu.InstanceFinalizer, gpu.LedgerFinalizer), obj: instance(gpu.InstanceFinalizer), wantAsked: true,
			wantErr: `instances.gpu.kiln.dev "train" is forbidden: metadata.finalizers: removing gpu.kiln.dev/ledger needs "update" on instances/finalizers, which user "tenant-a" does not have; kiln-apiserver removes it once the Instance's card-hours are in its namespace's Budgets: delete the object and wait`},
		{name: "kiln-controller removing it", resource: "instances", user: controller,
			old: instance(gpu.InstanceFinalizer), obj: instance(), wantAsked: true},
		{name: "a tenant removing their own finalizer", resource: "instances", user: tenant,
			old: instance(gpu.InstanceFinalizer, "team/keep"), obj: instance(gpu.InstanceFinalizer)},
		{name: "a tenant adding one", resource: "instances", user: tenant,
			old: instance(), obj: instance(gpu.InstanceFinalizer)},
		{name: "an update that keeps it", resource: "claims", user: tenant,
			old: claim(gpu.ClaimFinalizer), obj: claim(gpu.ClaimFinalizer)},
		{name: "budgets have no guarded finalizer", resource: "budgets", user: tenant,
			old: instance(gpu.InstanceFinalizer), obj: instance()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []authorizer.Attributes
			p := New()
			p.SetAuthorizer(allowFinalizers(&asked))
			m, _ := tc.obj.(metav1.Object)
			a := admission.NewAttributesRecord(tc.obj, tc.old, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", m.GetName(),
				gpu.Resource(tc.resource).WithVersion("v1alpha1"), tc.subresource, admission.Update, &metav1.UpdateOptions{}, false,
				&user.DefaultInfo{Name: tc.user})
			wantRefusal(t, p.Validate(context.Background(), a, nil), tc.wantErr)
			if got := len(asked) > 0; got != tc.wantAsked {
				t.Fatalf("authorizer asked: %v, want %v", got, tc.wantAsked)
			}
			if tc.wantAsked {
				if a := asked[0]; a.GetResource() != tc.resource || a.GetSubresource() != "finalizers" || a.GetVerb() != "update" || a.GetNamespace() != "team-a" {
					t.Errorf("asked %+v", a)
				}
			}
		})
	}
}

func TestValidateAuthorizerError(t *testing.T) {
	p := New()
	p.SetAuthorizer(authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", errors.New("webhook down")
	}))
	old := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", Finalizers: []string{gpu.InstanceFinalizer}}}
	obj := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a"}}
	a := admission.NewAttributesRecord(obj, old, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", "train",
		gpu.Resource("instances").WithVersion("v1alpha1"), "", admission.Update, &metav1.UpdateOptions{}, false, &user.DefaultInfo{Name: "tenant-a"})
	var status apierrors.APIStatus
	if err := p.Validate(context.Background(), a, nil); !errors.As(err, &status) || status.Status().Code != http.StatusInternalServerError {
		t.Fatalf("error %v, want 500", err)
	}
}

// TestOrphaning: the garbage collector's orphan finalizer, and the deletes
// that add it, are refused on Instances and Claims, for everyone.
func TestOrphaning(t *testing.T) {
	orphan, background := metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground
	instance := func(finalizers ...string) *gpu.Instance {
		return &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", Finalizers: finalizers}}
	}
	for _, tc := range []struct {
		name     string
		resource string
		op       admission.Operation
		opts     runtime.Object
		old, obj runtime.Object
		wantErr  string
	}{
		{name: "kubectl delete --cascade=orphan", resource: "instances", op: admission.Delete,
			opts: &metav1.DeleteOptions{PropagationPolicy: &orphan}, old: instance(gpu.InstanceFinalizer),
			wantErr: `instances.gpu.kiln.dev "train" is forbidden: propagationPolicy Orphan would detach the Instance's Pod from it, and the Pod would run on uncharged once the Instance is gone; delete with propagationPolicy Background (kubectl's default) or Foreground`},
		{name: "the old orphanDependents of a Claim", resource: "claims", op: admission.Delete,
			//lint:ignore SA1019 deprecated, but the API server still honours it.
			opts: &metav1.DeleteOptions{OrphanDependents: ptr.To(true)}, old: instance(),
			wantErr: `claims.gpu.kiln.dev "train" is forbidden: orphanDependents would detach the Claim's Pod from it, and the Pod would run on uncharged once the Claim is gone; delete with propagationPolicy Background (kubectl's default) or Foreground`},
		{name: "a background delete", resource: "instances", op: admission.Delete,
			opts: &metav1.DeleteOptions{PropagationPolicy: &background}, old: instance()},
		{name: "a delete with no options", resource: "instances", op: admission.Delete,
			opts: &metav1.DeleteOptions{}, old: instance()},
		{name: "the finalizer added by an update", resource: "instances", op: admission.Update, opts: &metav1.UpdateOptions{},
			old: instance(gpu.InstanceFinalizer), obj: instance(gpu.InstanceFinalizer, metav1.FinalizerOrphanDependents),
			wantErr: `instances.gpu.kiln.dev "train" is forbidden: metadata.finalizers: "orphan" would have the garbage collector detach the Instance's Pod from it, and the Pod run on uncharged once the Instance is gone; remove it`},
		{name: "the finalizer on a create", resource: "instances", op: admission.Create, opts: &metav1.CreateOptions{},
			obj:     instance(metav1.FinalizerOrphanDependents),
			wantErr: `instances.gpu.kiln.dev "train" is forbidden: metadata.finalizers: "orphan" would have the garbage collector detach the Instance's Pod from it, and the Pod run on uncharged once the Instance is gone; remove it`},
		{name: "a budget's", resource: "budgets", op: admission.Delete,
			opts: &metav1.DeleteOptions{PropagationPolicy: &orphan}, old: instance()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				return authorizer.DecisionAllow, "", nil
			}))
			a := admission.NewAttributesRecord(tc.obj, tc.old, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", "train",
				gpu.Resource(tc.resource).WithVersion("v1alpha1"), "", tc.op, tc.opts, false,
				&user.DefaultInfo{Name: "system:masters-admin", Groups: []string{"system:masters"}})
			wantRefusal(t, p.Validate(context.Background(), a, nil), tc.wantErr)
		})
	}
}

// wantRefusal fails the test unless err is the 403 want, or nil when want
// is empty.
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || err.Error() != want || !apierrors.IsForbidden(err)):
		t.Fatalf("error %v\nwant 403 %s", err, want)
	}
}

func TestAdmit(t *testing.T) {
	const ledger = gpu.LedgerFinalizer
	for _, tc := range []struct {
		name        string
		resource    string
		subresource string
		op          admission.Operation
		obj         metav1.Object
		// standalone: no kiln-controller runs beside the server.
		standalone bool
		want       []string
	}{
		{name: "a new Claim", resource: "claims", op: admission.Create,
			obj: &gpu.Claim{}, want: []string{gpu.ClaimFinalizer, ledger}},
		{name: "a new Claim with a finalizer of its own and one of Kiln's", resource: "claims", op: admission.Create,
			obj:  &gpu.Claim{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"team/keep", ledger}}},
			want: []string{"team/keep", ledger, gpu.ClaimFinalizer}},
		{name: "a new Claim, standalone", resource: "claims", op: admission.Create, standalone: true,
			obj: &gpu.Claim{}, want: []string{gpu.ClaimFinalizer, ledger}},
		{name: "a new Instance", resource: "instances", op: admission.Create,
			obj: &gpu.Instance{}, want: []string{gpu.InstanceFinalizer, ledger}},
		{name: "a new Instance with a finalizer of its own", resource: "instances", op: admission.Create,
			obj:  &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"team/keep"}}},
			want: []string{"team/keep", gpu.InstanceFinalizer, ledger}},
		{name: "a new Instance created stopped (kiln-controller adds them once it is Stopped)", resource: "instances", op: admission.Create,
			obj: &gpu.Instance{Spec: gpu.InstanceSpec{Stopped: true}}},
		{name: "a new Instance, standalone (no kiln-controller to take them off)", resource: "instances", op: admission.Create, standalone: true,
			obj: &gpu.Instance{}},
		{name: "an update", resource: "claims", op: admission.Update,
			obj: &gpu.Claim{}},
		{name: "an Instance's update", resource: "instances", op: admission.Update,
			obj: &gpu.Instance{}},
		{name: "a status write", resource: "claims", subresource: "status", op: admission.Create,
			obj: &gpu.Claim{}},
		{name: "an Instance's start", resource: "instances", subresource: "start", op: admission.Create,
			obj: &gpu.Instance{}},
		{name: "a Budget", resource: "budgets", op: admission.Create,
			obj: &gpu.Budget{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var old runtime.Object
			if tc.op == admission.Update {
				old = tc.obj.(runtime.Object)
			}
			a := admission.NewAttributesRecord(tc.obj.(runtime.Object), old, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", "train",
				gpu.Resource(tc.resource).WithVersion("v1alpha1"), tc.subresource, tc.op, &metav1.CreateOptions{}, false,
				&user.DefaultInfo{Name: "tenant-a"})
			p := New()
			p.SetKilnController(!tc.standalone)
			if err := p.Admit(context.Background(), a, nil); err != nil {
				t.Fatal(err)
			}
			if got := tc.obj.GetFinalizers(); !slices.Equal(got, tc.want) {
				t.Errorf("finalizers %q, want %q", got, tc.want)
			}
		})
	}
}
