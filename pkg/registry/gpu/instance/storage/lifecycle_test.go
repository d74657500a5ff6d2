package storage

import (
	"context"
	"fmt"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// fakeStore does what the generic store's Update does with objInfo and the
// validation, on one stored Instance, without etcd; the server tests run
// the real one.
type fakeStore struct{ stored *gpu.Instance }

func (s *fakeStore) New() runtime.Object { return &gpu.Instance{} }

func (s *fakeStore) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, _ rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if s.stored == nil || s.stored.Name != name {
		return nil, false, apierrors.NewNotFound(gpu.Resource("instances"), name)
	}
	obj, err := objInfo.UpdatedObject(ctx, s.stored.DeepCopy())
	if err != nil {
		return nil, false, err
	}
	if err := updateValidation(ctx, obj.DeepCopyObject(), s.stored.DeepCopy()); err != nil {
		return nil, false, err
	}
	if len(options.DryRun) == 0 {
		s.stored = obj.(*gpu.Instance)
	}
	return obj, false, nil
}

// recorder is an admission chain that notes what it is asked, marks what
// it mutates, and refuses when told to.
type recorder struct {
	calls  []string
	refuse error
}

func (r *recorder) Handles(admission.Operation) bool { return true }

func (r *recorder) note(phase string, a admission.Attributes) {
	stopped := func(o runtime.Object) string {
		if i, ok := o.(*gpu.Instance); ok {
			return fmt.Sprint(i.Spec.Stopped)
		}
		return "-"
	}
	r.calls = append(r.calls, fmt.Sprintf("%s %s %s %s/%s %s/%s user=%s dryRun=%v stopped=%s->%s", phase, a.GetOperation(),
		a.GetKind().Kind, a.GetResource().Resource, a.GetSubresource(), a.GetNamespace(), a.GetName(),
		a.GetUserInfo().GetName(), a.IsDryRun(), stopped(a.GetOldObject()), stopped(a.GetObject())))
}

func (r *recorder) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	r.note("admit", a)
	if i, ok := a.GetObject().(*gpu.Instance); ok {
		i.Annotations = map[string]string{"mutated": "yes"}
	}
	return nil
}

func (r *recorder) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	r.note("validate", a)
	if i, ok := a.GetObject().(*gpu.Instance); ok && i.Annotations["mutated"] != "yes" {
		return fmt.Errorf("validated before mutation")
	}
	return r.refuse
}

func TestLifecycleCreate(t *testing.T) {
	const (
		stopAdmit     = "admit UPDATE Instance instances/ team-a/train user=tenant-a dryRun=false stopped=false->true"
		stopValidate  = "validate UPDATE Instance instances/ team-a/train user=tenant-a dryRun=false stopped=false->true"
		startAdmit    = "admit UPDATE Instance instances/ team-a/train user=tenant-a dryRun=false stopped=true->false"
		startValidate = "validate UPDATE Instance instances/ team-a/train user=tenant-a dryRun=false stopped=true->false"
	)
	running := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", ResourceVersion: "7"}, Spec: gpu.InstanceSpec{Type: "h100"}}
	stopped := running.DeepCopy()
	stopped.Spec.Stopped = true
	deleting := stopped.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}

	cases := []struct {
		name         string
		stored       *gpu.Instance
		stop         bool
		dryRun       bool
		refuseCreate error // from the handler's own chain, on the posted body
		refuse       error // from the chain on the update
		wantCalls    []string
		wantStopped  bool // stored afterwards
		wantErr      string
	}{
		{name: "stop", stored: running, stop: true,
			wantCalls: []string{stopAdmit, stopValidate}, wantStopped: true},
		{name: "start", stored: stopped,
			wantCalls: []string{startAdmit, startValidate}},
		{name: "stop of a stopped Instance is admitted as a no-op update", stored: stopped, stop: true,
			wantCalls:   []string{"admit UPDATE Instance instances/ team-a/train user=tenant-a dryRun=false stopped=true->true", "validate UPDATE Instance instances/ team-a/train user=tenant-a dryRun=false stopped=true->true"},
			wantStopped: true},
		{name: "a refusal stores nothing", stored: stopped, refuse: admission.NewForbidden(
			admission.NewAttributesRecord(nil, nil, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", "train", gpu.Resource("instances").WithVersion("v1alpha1"), "", admission.Update, nil, false, nil),
			fmt.Errorf("exceeds budget")),
			wantCalls: []string{startAdmit, startValidate}, wantStopped: true,
			wantErr: `instances.gpu.kiln.dev "train" is forbidden: exceeds budget`},
		{name: "the handler's chain refuses first", stored: stopped, refuseCreate: fmt.Errorf("denied by a policy on instances/start"),
			wantStopped: true, wantErr: "denied by a policy on instances/start"},
		{name: "dry run", stored: stopped, dryRun: true, wantStopped: true,
			wantCalls: []string{
				"admit UPDATE Instance instances/ team-a/train user=tenant-a dryRun=true stopped=true->false",
				"validate UPDATE Instance instances/ team-a/train user=tenant-a dryRun=true stopped=true->false"}},
		{name: "an Instance being deleted is not started", stored: deleting, wantStopped: true,
			wantErr: `Operation cannot be fulfilled on instances.gpu.kiln.dev "train": instance team-a/train is being deleted and cannot be started`},
		{name: "missing", stop: true, wantErr: `instances.gpu.kiln.dev "train" not found`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := &fakeStore{}
			if tc.stored != nil {
				store.stored = tc.stored.DeepCopy()
			}
			chain := &recorder{refuse: tc.refuse}
			r := &LifecycleREST{store: store, stopped: tc.stop, admit: chain, objects: admission.NewObjectInterfacesFromScheme(runtime.NewScheme())}
			ctx := genericapirequest.WithNamespace(context.Background(), "team-a")
			ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "tenant-a"})
			ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{APIVersion: "v1alpha1", Resource: "instances", Subresource: "start"})
			posted := &gpu.Instance{}
			createValidation := func(_ context.Context, obj runtime.Object) error {
				if obj != posted {
					t.Errorf("the handler's chain got %v, want the posted body", obj)
				}
				return tc.refuseCreate
			}
			opts := &metav1.CreateOptions{}
			if tc.dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}

			out, err := r.Create(ctx, "train", posted, createValidation, opts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("unexpected error: %v", err)
			} else if got := out.(*gpu.Instance); got.Spec.Stopped != tc.stop || got.Annotations["mutated"] != "yes" {
				t.Errorf("answered stopped %v, annotations %v; want %v, mutated", got.Spec.Stopped, got.Annotations, tc.stop)
			}
			if !slices.Equal(chain.calls, tc.wantCalls) {
				t.Errorf("admission calls:\n got %q\nwant %q", chain.calls, tc.wantCalls)
			}
			if store.stored != nil && store.stored.Spec.Stopped != tc.wantStopped {
				t.Errorf("stored stopped %v, want %v", store.stored.Spec.Stopped, tc.wantStopped)
			}
		})
	}
}

// TestLifecycleWithoutAdmission: a server with no chain still flips.
func TestLifecycleWithoutAdmission(t *testing.T) {
	store := &fakeStore{stored: &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a"}}}
	r := &LifecycleREST{store: store, stopped: true, objects: admission.NewObjectInterfacesFromScheme(runtime.NewScheme())}
	ctx := genericapirequest.WithNamespace(context.Background(), "team-a")
	if _, err := r.Create(ctx, "train", &gpu.Instance{}, nil, &metav1.CreateOptions{}); err != nil || !store.stored.Spec.Stopped {
		t.Errorf("stop without admission: %v, stopped %v", err, store.stored.Spec.Stopped)
	}
}
