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
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/domain/instancechange"
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

func (s *fakeStore) get(_ context.Context, _, name string) (*gpu.Instance, error) {
	if s.stored == nil || s.stored.Name != name {
		return nil, apierrors.NewNotFound(gpu.Resource("instances"), name)
	}
	return s.stored.DeepCopy(), nil
}

// chain stands for the handler's admission of the POST, a CREATE of the
// subresource: a mutating plugin and a validating one that read the
// Instance through instancechange, note what they see, and mark or refuse.
type chain struct {
	get     instancechange.Getter
	mutates bool
	calls   []string
	refuse  error
}

func (c *chain) note(phase string, inst, old *gpu.Instance) {
	stopped := func(i *gpu.Instance) string {
		if i == nil {
			return "-"
		}
		return fmt.Sprint(i.Spec.Stopped)
	}
	c.calls = append(c.calls, fmt.Sprintf("%s stopped=%s->%s", phase, stopped(old), stopped(inst)))
}

func (c *chain) admit(ctx context.Context, a admission.Attributes) error {
	inst, old, err := instancechange.Of(ctx, a, c.get)
	if err != nil {
		return err
	}
	c.note("admit", inst, old)
	metav1.SetMetaDataAnnotation(&inst.ObjectMeta, gpu.SizedResourcesAnnotation, "cpu")
	return nil
}

func (c *chain) validate(ctx context.Context, a admission.Attributes) error {
	inst, old, err := instancechange.Of(ctx, a, nil)
	if err != nil {
		return err
	}
	c.note("validate", inst, old)
	if c.mutates && inst.Annotations[gpu.SizedResourcesAnnotation] != "cpu" {
		return fmt.Errorf("validated what was not mutated")
	}
	return c.refuse
}

func TestLifecycleCreate(t *testing.T) {
	running := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", UID: "uid-1", ResourceVersion: "7"}, Spec: gpu.InstanceSpec{Type: "h100"}}
	stopped := running.DeepCopy()
	stopped.Spec.Stopped = true
	deleting := stopped.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}

	cases := []struct {
		name        string
		stored      *gpu.Instance
		stop        bool
		dryRun      bool
		mutating    bool                // a mutating plugin reads the Instance (Kiln's sizing does)
		between     func(*gpu.Instance) // a write between admission and storage
		refuse      error
		wantCalls   []string
		wantStopped bool   // stored afterwards
		wantLabel   string // the team label stored afterwards
		wantErr     string
	}{
		{name: "stop", stored: running, stop: true, mutating: true,
			wantCalls: []string{"admit stopped=false->true", "validate stopped=false->true"}, wantStopped: true},
		{name: "start", stored: stopped, mutating: true,
			wantCalls: []string{"admit stopped=true->false", "validate stopped=true->false"}},
		{name: "stop of a stopped Instance is admitted as a no-op update", stored: stopped, stop: true, mutating: true,
			wantCalls: []string{"admit stopped=true->true", "validate stopped=true->true"}, wantStopped: true},
		{name: "a refusal stores nothing", stored: stopped, mutating: true, refuse: fmt.Errorf("exceeds budget"),
			wantCalls: []string{"admit stopped=true->false", "validate stopped=true->false"}, wantStopped: true,
			wantErr: "exceeds budget"},
		{name: "dry run", stored: stopped, dryRun: true, mutating: true, wantStopped: true,
			wantCalls: []string{"admit stopped=true->false", "validate stopped=true->false"}},
		{name: "an Instance being deleted is not started", stored: deleting, mutating: true, wantStopped: true,
			wantCalls: []string{"admit stopped=true->false"},
			wantErr:   `Operation cannot be fulfilled on instances.gpu.kiln.dev "train": instance team-a/train is being deleted and cannot be started`},
		{name: "a spec changed after admission read it is a conflict", stored: stopped, mutating: true,
			between:   func(i *gpu.Instance) { i.ResourceVersion, i.Generation, i.Spec.Image = "8", 2, "other:1" },
			wantCalls: []string{"admit stopped=true->false"}, wantStopped: true,
			wantErr: `Operation cannot be fulfilled on instances.gpu.kiln.dev "train": the spec of instance team-a/train changed while its start was admitted; try again`},
		{name: "status and labels written after admission read it are kept", stored: stopped, mutating: true,
			between: func(i *gpu.Instance) {
				i.ResourceVersion, i.Status.Phase, i.Labels = "8", gpu.InstanceStopped, map[string]string{"team": "vision"}
			},
			wantCalls: []string{"admit stopped=true->false", "validate stopped=true->false"},
			wantLabel: "vision"},
		{name: "missing", stop: true, mutating: true, wantErr: `instances.gpu.kiln.dev "train" not found`},
		{name: "without a mutating plugin the stored Instance is flipped", stored: running, stop: true,
			wantCalls: []string{"validate stopped=false->true"}, wantStopped: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := &fakeStore{}
			if tc.stored != nil {
				store.stored = tc.stored.DeepCopy()
			}
			sub := "start"
			if tc.stop {
				sub = "stop"
			}
			r := &LifecycleREST{store: store, subresource: sub}
			c := &chain{get: store.get, mutates: tc.mutating, refuse: tc.refuse}
			opts := &metav1.CreateOptions{}
			if tc.dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			// What the create handler does: admit the posted body as a
			// CREATE of the subresource, then hand validation to Create.
			posted := &gpu.Instance{}
			attrs := admission.NewAttributesRecord(posted, nil, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", "train",
				gpu.Resource("instances").WithVersion("v1alpha1"), sub, admission.Create, opts, tc.dryRun, &user.DefaultInfo{Name: "tenant-a"})
			ctx := context.Background()
			if tc.mutating {
				if err := c.admit(ctx, attrs); err != nil {
					if tc.wantErr == "" || err.Error() != tc.wantErr {
						t.Fatalf("admit: %v", err)
					}
					return
				}
			}
			if tc.between != nil {
				tc.between(store.stored)
			}
			createValidation := func(ctx context.Context, obj runtime.Object) error {
				return c.validate(ctx, admission.NewAttributesRecord(obj, nil, attrs.GetKind(), "team-a", "train",
					attrs.GetResource(), sub, admission.Create, opts, tc.dryRun, attrs.GetUserInfo()))
			}

			out, err := r.Create(ctx, "train", posted, createValidation, opts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("unexpected error: %v", err)
			} else if got := out.(*gpu.Instance); got.Spec.Stopped != tc.stop || (got.Annotations[gpu.SizedResourcesAnnotation] == "cpu") != tc.mutating {
				t.Errorf("answered stopped %v, annotations %v; want %v, mutated %v", got.Spec.Stopped, got.Annotations, tc.stop, tc.mutating)
			}
			if store.stored != nil && store.stored.Labels["team"] != tc.wantLabel {
				t.Errorf("stored labels %v, want team=%q", store.stored.Labels, tc.wantLabel)
			}
			if !slices.Equal(c.calls, tc.wantCalls) {
				t.Errorf("admission calls:\n got %q\nwant %q", c.calls, tc.wantCalls)
			}
			if store.stored != nil && store.stored.Spec.Stopped != tc.wantStopped {
				t.Errorf("stored stopped %v, want %v", store.stored.Spec.Stopped, tc.wantStopped)
			}
		})
	}
}

// TestLifecycleIgnoresTheBody: what a tenant posts never reaches storage,
// with or without a plugin filling the body: only spec.stopped changes.
func TestLifecycleIgnoresTheBody(t *testing.T) {
	for _, mutating := range []bool{false, true} {
		t.Run(fmt.Sprintf("mutating plugin %v", mutating), func(t *testing.T) {
			stored := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", UID: "uid-1", ResourceVersion: "7"},
				Spec: gpu.InstanceSpec{Type: "h100", Stopped: true, Image: "mine:1"}}
			store := &fakeStore{stored: stored.DeepCopy()}
			// The handler wipes the UID of a posted body; the rest stays.
			posted := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7", Labels: map[string]string{"forged": "yes"}},
				Spec: gpu.InstanceSpec{Type: "h100", Image: "evil:1", Privileged: true}}
			r := &LifecycleREST{store: store, subresource: "start"}
			if mutating {
				attrs := admission.NewAttributesRecord(posted, nil, gpu.Kind("Instance").WithVersion("v1alpha1"), "team-a", "train",
					gpu.Resource("instances").WithVersion("v1alpha1"), "start", admission.Create, &metav1.CreateOptions{}, false, nil)
				if _, _, err := instancechange.Of(context.Background(), attrs, store.get); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Create(context.Background(), "train", posted, nil, &metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			want := stored.DeepCopy()
			want.Spec.Stopped = false
			if got := store.stored; got.Spec.Image != "mine:1" || got.Spec.Privileged || got.Labels != nil || got.Spec.Stopped {
				t.Errorf("stored %+v %+v, want only spec.stopped changed: %+v", got.ObjectMeta, got.Spec, want.Spec)
			}
		})
	}
}
