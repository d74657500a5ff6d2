package instancetypeaccess

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

func instanceType(name string, mutate func(*v1alpha1.InstanceTypeSpec)) *v1alpha1.InstanceType {
	t := &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.InstanceTypeSpec{Accelerator: &v1alpha1.Accelerator{
			Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"), MaxPerInstance: 4,
			Exclusive: &v1alpha1.ExclusiveSharing{}, Sliced: &v1alpha1.SlicedSharing{},
			Partitions: []v1alpha1.PartitionProfile{
				{Name: "3g.40gb", Memory: resource.MustParse("40Gi")},
				{Name: "1g.10gb", Memory: resource.MustParse("10Gi")},
			},
		}},
	}
	if mutate != nil {
		mutate(&t.Spec)
	}
	return t
}

// The types the lister knows. "h100" offers every mode; the others each
// lack one thing.
func listedTypes() []runtime.Object {
	deleting := instanceType("deleting", nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"gpu.kiln.dev/instances"}
	return []runtime.Object{
		instanceType("h100", nil),
		instanceType("whole", func(s *v1alpha1.InstanceTypeSpec) {
			s.Accelerator.Sliced, s.Accelerator.Partitions, s.Accelerator.MaxPerInstance = nil, nil, 2
		}),
		instanceType("sliced", func(s *v1alpha1.InstanceTypeSpec) { s.Accelerator.Exclusive, s.Accelerator.Partitions = nil, nil }),
		instanceType("mps", func(s *v1alpha1.InstanceTypeSpec) {
			s.Accelerator.Exclusive, s.Accelerator.Partitions = nil, nil
			s.Accelerator.Sliced = &v1alpha1.SlicedSharing{Isolation: v1alpha1.SliceIsolationMPS, SharesPerCard: 4}
		}),
		instanceType("cpu", func(s *v1alpha1.InstanceTypeSpec) { s.Accelerator = nil }),
		instanceType("held", func(s *v1alpha1.InstanceTypeSpec) { s.Hold = v1alpha1.HoldNew }),
		instanceType("idle-30m", func(s *v1alpha1.InstanceTypeSpec) {
			s.Idle = &v1alpha1.IdlePolicy{StopAfter: metav1.Duration{Duration: 30 * time.Minute}}
		}),
		instanceType("draining", func(s *v1alpha1.InstanceTypeSpec) { s.Hold = v1alpha1.HoldDrain }),
		deleting,
		instanceType("gold", func(s *v1alpha1.InstanceTypeSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kiln.dev/tier": "gold"}}
		}),
		instanceType("team-a-only", func(s *v1alpha1.InstanceTypeSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a"}},
			}}
		}),
		instanceType("bad-selector", func(s *v1alpha1.InstanceTypeSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: "Near"},
			}}
		}),
	}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	l := map[string]string{corev1.LabelMetadataName: name}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// newPlugin returns the plugin with a synced lister of listedTypes and a
// Kiln client that also has "fresh", a type the lister has not seen yet.
// In cluster mode it also has a synced Namespace lister of team-a (gold)
// and team-b, and a kube client that also has team-new (gold).
func newPlugin(t *testing.T, cluster bool) *Plugin {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(fake.NewSimpleClientset(listedTypes()...), 0)
	fresh := instanceType("fresh", func(s *v1alpha1.InstanceTypeSpec) { s.Accelerator.MaxPerInstance = 8 })

	p := New()
	p.SetKilnInformerFactory(factory)
	p.SetKilnClient(fake.NewSimpleClientset(append(listedTypes(), fresh)...))
	var kubeFactory kubeinformers.SharedInformerFactory
	if cluster {
		teamA, teamB := namespace("team-a", map[string]string{"kiln.dev/tier": "gold"}), namespace("team-b", nil)
		kubeFactory = kubeinformers.NewSharedInformerFactory(kubefake.NewClientset(teamA, teamB), 0)
		p.SetExternalKubeInformerFactory(kubeFactory)
		p.SetExternalKubeClientSet(kubefake.NewClientset(teamA.DeepCopy(), teamB.DeepCopy(),
			namespace("team-new", map[string]string{"kiln.dev/tier": "gold"})))
	} else {
		// What standalone mode hands the plugin.
		p.SetExternalKubeInformerFactory(nil)
	}
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	if kubeFactory != nil {
		kubeFactory.Start(ctx.Done())
		for typ, ok := range kubeFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
	}
	return p
}

func TestValidateInitialization(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil || err.Error() != "InstanceTypeAccess needs the InstanceType lister and a Kiln client" {
		t.Errorf("error %v", err)
	}
}

// instance is a running one-card h100 Instance in team-a.
func instance(mutate ...func(*gpu.Instance)) *gpu.Instance {
	inst := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a"},
		Spec: gpu.InstanceSpec{
			Type:      "h100",
			Image:     "nvcr.io/nvidia/pytorch:24.05-py3",
			Resources: gpu.InstanceResources{Accelerators: ptr.To(int32(1))},
		},
	}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

func typeName(name string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Type = name }
}

func cards(n int32) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Resources.Accelerators = ptr.To(n) }
}

func noAccelerators(i *gpu.Instance) { i.Spec.Resources.Accelerators = nil }

func slice(percent int32) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		i.Spec.Resources.Accelerators, i.Spec.Resources.Slice = nil, &gpu.SliceRequest{MemoryPercent: percent, CoresPercent: percent}
	}
}

func partition(profile string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Resources.Accelerators, i.Spec.Resources.Partition = nil, profile }
}

func image(name string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Image = name }
}

func stopped(i *gpu.Instance) { i.Spec.Stopped = true }

func idleStopAfter(d time.Duration) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.IdleStopAfter = &metav1.Duration{Duration: d} }
}

func inNamespace(ns string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Namespace = ns }
}

func attributes(obj, old runtime.Object, resourceName, subresource string) admission.Attributes {
	accessor, _ := obj.(metav1.Object)
	op, opts := admission.Create, runtime.Object(&metav1.CreateOptions{})
	if old != nil {
		op, opts = admission.Update, &metav1.UpdateOptions{}
	}
	return admission.NewAttributesRecord(obj, old, v1alpha1.SchemeGroupVersion.WithKind(""), accessor.GetNamespace(), accessor.GetName(),
		v1alpha1.SchemeGroupVersion.WithResource(resourceName), subresource, op, opts, false, &user.DefaultInfo{Name: "tenant-a"})
}

type testCase struct {
	name string
	// cluster gives the plugin the kube Namespace lister and client.
	cluster     bool
	old         runtime.Object // nil for a create
	obj         runtime.Object
	subresource string
	// stored is the Instance a start or stop replaces.
	stored   *gpu.Instance
	wantCode int32 // 0: admitted
	wantErr  string
}

func TestValidateInstance(t *testing.T) {
	const (
		forbidden = `instances.gpu.kiln.dev "train" is forbidden: `
		invalid   = `Instance.gpu.kiln.dev "train" is invalid: `
		teamB     = `instancetype "team-a-only" is not offered to namespace "team-b" (its namespaceSelector is kubernetes.io/metadata.name in (team-a)); ask a cluster admin, or choose another type`
	)
	run(t, []testCase{
		{name: "one h100 card", obj: instance()},

		// The type exists.
		{name: "missing type", obj: instance(typeName("nonesuch")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + "spec.type: Invalid value: \"nonesuch\": no such instancetype; `kubectl get instancetypes` lists the ones there are"},
		{name: "no type named (a JSON patch removed the spec)", obj: instance(typeName("")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + "spec.type: Required value: name an InstanceType; `kubectl get instancetypes` lists the ones there are"},
		{name: "live client finds a type the lister has not seen", obj: instance(typeName("fresh"), cards(8))},
		{name: "live client's type is checked too", obj: instance(typeName("fresh"), cards(9)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Invalid value: 9: instancetype "fresh" allows at most 8 cards per instance`},
		{name: "status subresource is ignored", old: instance(typeName("nonesuch")), obj: instance(typeName("nonesuch"), cards(2)), subresource: "status"},
		// instances/start and instances/stop: the registry passes the new
		// Instance as the object and the stored one in the context.
		{name: "instances/start is checked as the start it is", stored: instance(typeName("held"), stopped), obj: instance(typeName("held")), subresource: "start",
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "held" is on Hold and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`},
		{name: "instances/stop starts nothing", stored: instance(typeName("held")), obj: instance(typeName("held"), stopped), subresource: "stop"},
		{name: "an unchanged request of an Instance whose type is gone is not checked",
			old: instance(typeName("nonesuch")), obj: instance(typeName("nonesuch"), image("other"))},

		// The type is being deleted.
		{name: "create on a type being deleted", obj: instance(typeName("deleting")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "deleting" is being deleted and takes no new instances; choose another type (kubectl get instancetypes)`},
		{name: "start on a type being deleted", old: instance(typeName("deleting"), stopped), obj: instance(typeName("deleting")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "deleting" is being deleted and takes no new instances; choose another type (kubectl get instancetypes)`},
		{name: "create stopped on a type being deleted starts nothing", obj: instance(typeName("deleting"), stopped)},
		{name: "edit of a running Instance on a type being deleted",
			old: instance(typeName("deleting")), obj: instance(typeName("deleting"), image("other"))},
		{name: "stop on a type being deleted", old: instance(typeName("deleting")), obj: instance(typeName("deleting"), stopped)},

		// Hold and Drain.
		{name: "create on a held type", obj: instance(typeName("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "held" is on Hold and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`},
		{name: "start on a held type", old: instance(typeName("held"), stopped), obj: instance(typeName("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "held" is on Hold and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`},
		{name: "edit of a running Instance on a held type", old: instance(typeName("held")), obj: instance(typeName("held"), image("other"))},
		{name: "create stopped on a held type", obj: instance(typeName("held"), stopped)},
		{name: "create on a draining type", obj: instance(typeName("draining")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "draining" is on Drain and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`},
		{name: "start on a draining type", old: instance(typeName("draining"), stopped), obj: instance(typeName("draining")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "draining" is on Drain and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`},
		{name: "edit of a running Instance on a draining type", old: instance(typeName("draining")), obj: instance(typeName("draining"), image("other"))},
		{name: "stop on a draining type", old: instance(typeName("draining")), obj: instance(typeName("draining"), stopped)},
		// A running Instance that asks for more, or for another share, on
		// a closed type is refused like a start (issue G, class 4).
		{name: "more cards for a running Instance on a held type", old: instance(typeName("held")), obj: instance(typeName("held"), cards(2)),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "held" is on Hold and takes no change of what a running Instance asks for; keep spec.resources as they are, or try again when a cluster admin reopens it`},
		{name: "another share for a running Instance on a draining type", old: instance(typeName("draining")), obj: instance(typeName("draining"), slice(50)),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "draining" is on Drain and takes no change of what a running Instance asks for; keep spec.resources as they are, or try again when a cluster admin reopens it`},
		{name: "more cards for a running Instance on a type being deleted", old: instance(typeName("deleting")), obj: instance(typeName("deleting"), cards(2)),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "deleting" is being deleted and takes no change of what a running Instance asks for; keep spec.resources as they are, or move to another type (kubectl get instancetypes)`},
		{name: "more cards for a stopped Instance on a held type: checked at its start", old: instance(typeName("held"), stopped), obj: instance(typeName("held"), stopped, cards(2))},
		{name: "standalone: more cards for a running Instance outside the namespaceSelector", old: instance(typeName("gold")), obj: instance(typeName("gold"), cards(2)),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "gold" is not offered to namespace "team-a" (its namespaceSelector is kiln.dev/tier=gold); ask a cluster admin, or choose another type`},

		// namespaceSelector without the cluster's Namespaces: only the name label.
		{name: "standalone: selector on the name admits the namespace", obj: instance(typeName("team-a-only"))},
		{name: "standalone: selector on the name refuses another namespace", obj: instance(typeName("team-a-only"), inNamespace("team-b")),
			wantCode: http.StatusForbidden,
			wantErr:  `instances.gpu.kiln.dev "train" is forbidden: ` + teamB},
		{name: "standalone: a namespace has no other labels", obj: instance(typeName("gold")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "gold" is not offered to namespace "team-a" (its namespaceSelector is kiln.dev/tier=gold); ask a cluster admin, or choose another type`},
		{name: "standalone: a stopped Instance is not checked until it starts", obj: instance(typeName("gold"), stopped)},
		{name: "standalone: a start is checked", old: instance(typeName("gold"), stopped), obj: instance(typeName("gold")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "gold" is not offered to namespace "team-a" (its namespaceSelector is kiln.dev/tier=gold); ask a cluster admin, or choose another type`},
		{name: "invalid namespaceSelector", obj: instance(typeName("bad-selector")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "bad-selector" has an invalid namespaceSelector: "Near" is not a valid label selector operator`},

		// namespaceSelector with the cluster's Namespaces.
		{name: "cluster: labelled namespace admitted", cluster: true, obj: instance(typeName("gold"))},
		{name: "cluster: unlabelled namespace refused", cluster: true, obj: instance(typeName("gold"), inNamespace("team-b")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "gold" is not offered to namespace "team-b" (its namespaceSelector is kiln.dev/tier=gold); ask a cluster admin, or choose another type`},
		{name: "cluster: selector on the name admits the namespace", cluster: true, obj: instance(typeName("team-a-only"))},
		{name: "cluster: selector on the name refuses another namespace", cluster: true, obj: instance(typeName("team-a-only"), inNamespace("team-b")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + teamB},
		{name: "cluster: live client finds a namespace the lister has not seen", cluster: true, obj: instance(typeName("gold"), inNamespace("team-new"))},
		{name: "cluster: missing namespace", cluster: true, obj: instance(typeName("gold"), inNamespace("ghost")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `reading namespace "ghost": namespaces "ghost" not found`},
		{name: "cluster: no selector needs no namespace", cluster: true, obj: instance(inNamespace("ghost"))},

		// The idle limit: a tenant may ask for a shorter one, never a longer.
		{name: "a shorter idle limit", obj: instance(typeName("idle-30m"), idleStopAfter(10*time.Minute))},
		{name: "the type's idle limit", obj: instance(typeName("idle-30m"), idleStopAfter(30*time.Minute))},
		{name: "a longer idle limit", obj: instance(typeName("idle-30m"), idleStopAfter(2*time.Hour)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.idleStopAfter: Invalid value: "2h0m0s": may be at most 30m0s, the idle limit of instancetype "idle-30m" (its spec.idle.stopAfter); set a shorter one, or remove idleStopAfter to take the type's`},
		{name: "a longer idle limit on a running Instance", old: instance(typeName("idle-30m"), idleStopAfter(10*time.Minute)),
			obj: instance(typeName("idle-30m"), idleStopAfter(31*time.Minute)), wantCode: http.StatusUnprocessableEntity,
			wantErr: invalid + `spec.idleStopAfter: Invalid value: "31m0s": may be at most 30m0s, the idle limit of instancetype "idle-30m" (its spec.idle.stopAfter); set a shorter one, or remove idleStopAfter to take the type's`},
		{name: "a longer idle limit on a stopped Instance", obj: instance(typeName("idle-30m"), stopped, idleStopAfter(time.Hour)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.idleStopAfter: Invalid value: "1h0m0s": may be at most 30m0s, the idle limit of instancetype "idle-30m" (its spec.idle.stopAfter); set a shorter one, or remove idleStopAfter to take the type's`},
		{name: "a start after the type's limit was lowered", stored: instance(typeName("idle-30m"), stopped, idleStopAfter(time.Hour)),
			obj: instance(typeName("idle-30m"), idleStopAfter(time.Hour)), subresource: "start", wantCode: http.StatusUnprocessableEntity,
			wantErr: invalid + `spec.idleStopAfter: Invalid value: "1h0m0s": may be at most 30m0s, the idle limit of instancetype "idle-30m" (its spec.idle.stopAfter); set a shorter one, or remove idleStopAfter to take the type's`},
		{name: "an unchanged idle limit on a running Instance is not checked again", old: instance(typeName("idle-30m"), idleStopAfter(time.Hour)),
			obj: instance(typeName("idle-30m"), idleStopAfter(time.Hour), image("other"))},
		{name: "any idle limit on a type without one", obj: instance(idleStopAfter(100 * time.Hour))},

		// Modes.
		{name: "slice on a sliced type", obj: instance(typeName("sliced"), slice(25))},
		{name: "slice on a type without slices", obj: instance(typeName("whole"), slice(25)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.slice: Forbidden: instancetype "whole" does not offer slices; ask for whole cards or choose a sliced type`},
		{name: "one MPS share", obj: instance(typeName("mps"), slice(25))},
		{name: "less than an MPS share", obj: instance(typeName("mps"), slice(10)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.slice: Invalid value: "memoryPercent 10, coresPercent 10": instancetype "mps" cuts each card into 4 MPS shares of 25%: set memoryPercent to 25 and leave coresPercent unset (or 25)`},
		{name: "an MPS share with more compute", obj: instance(typeName("mps"), func(i *gpu.Instance) {
			i.Spec.Resources.Accelerators, i.Spec.Resources.Slice = nil, &gpu.SliceRequest{MemoryPercent: 25, CoresPercent: 50}
		}), wantCode: http.StatusUnprocessableEntity,
			wantErr: invalid + `spec.resources.slice: Invalid value: "memoryPercent 25, coresPercent 50": instancetype "mps" cuts each card into 4 MPS shares of 25%: set memoryPercent to 25 and leave coresPercent unset (or 25)`},
		{name: "listed partition", obj: instance(partition("1g.10gb"))},
		{name: "unlisted partition", obj: instance(partition("2g.20gb")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.partition: Unsupported value: "2g.20gb": supported values: "3g.40gb", "1g.10gb"`},
		{name: "partition on a type without partitions", obj: instance(typeName("whole"), partition("1g.10gb")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.partition: Forbidden: instancetype "whole" offers no partitions`},
		{name: "whole cards on a type without exclusive", obj: instance(typeName("sliced")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Forbidden: instancetype "sliced" does not offer whole cards`},
		{name: "cards at maxPerInstance", obj: instance(typeName("whole"), cards(2))},
		{name: "cards above maxPerInstance", obj: instance(typeName("whole"), cards(3)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Invalid value: 3: instancetype "whole" allows at most 2 cards per instance`},
		{name: "CPU-only type, no request", obj: instance(typeName("cpu"), noAccelerators)},
		{name: "CPU-only type, zero cards", obj: instance(typeName("cpu"), cards(0))},
		{name: "CPU-only type, cards", obj: instance(typeName("cpu")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Forbidden: instancetype "cpu" is CPU-only and has no accelerators; remove it or choose a GPU type`},
		{name: "CPU-only type, slice", obj: instance(typeName("cpu"), slice(50)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.slice: Forbidden: instancetype "cpu" is CPU-only and has no accelerators; remove it or choose a GPU type`},
		{name: "CPU-only type, partition", obj: instance(typeName("cpu"), partition("1g.10gb")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.partition: Forbidden: instancetype "cpu" is CPU-only and has no accelerators; remove it or choose a GPU type`},
		{name: "GPU type, no request", obj: instance(noAccelerators),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Required value: instancetype "h100" has accelerators: ask for whole cards, a slice or a partition`},
		{name: "GPU type, zero cards", obj: instance(cards(0)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Required value: instancetype "h100" has accelerators: ask for whole cards, a slice or a partition`},
		{name: "a stopped Instance's request is checked", obj: instance(typeName("whole"), slice(25), stopped),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.slice: Forbidden: instancetype "whole" does not offer slices; ask for whole cards or choose a sliced type`},
		{name: "a changed request of a running Instance is checked", old: instance(typeName("whole")), obj: instance(typeName("whole"), cards(3)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.resources.accelerators: Invalid value: 3: instancetype "whole" allows at most 2 cards per instance`},
		{name: "an allowed change of request", old: instance(typeName("whole")), obj: instance(typeName("whole"), cards(2))},
	})
}

// TestNamespaceUnreadable: when the cluster refuses Kiln's own read of the
// namespace, the tenant is told which namespace could not be read, not
// handed the cluster's refusal of Kiln's ServiceAccount as their own.
func TestNamespaceUnreadable(t *testing.T) {
	p := newPlugin(t, true)
	kube := kubefake.NewClientset()
	kube.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "ghost", errors.New("system:serviceaccount:kiln:apiserver may not get namespaces"))
	})
	p.SetExternalKubeClientSet(kube)
	err := p.Validate(context.Background(), attributes(instance(typeName("gold"), inNamespace("ghost")), nil, "instances", ""), nil)
	checkError(t, err, http.StatusForbidden,
		`instances.gpu.kiln.dev "train" is forbidden: reading namespace "ghost": namespaces "ghost" is forbidden: system:serviceaccount:kiln:apiserver may not get namespaces`)
}

// claim is a Claim on two h100 cards in team-a.
func claim(mutate func(*gpu.Claim)) *gpu.Claim {
	c := &gpu.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-two", Namespace: "team-a"},
		Spec:       gpu.ClaimSpec{Type: "h100", Accelerators: ptr.To(int32(2))},
	}
	if mutate != nil {
		mutate(c)
	}
	return c
}

func claimType(name string) func(*gpu.Claim) { return func(c *gpu.Claim) { c.Spec.Type = name } }

func TestValidateClaim(t *testing.T) {
	const (
		forbidden = `claims.gpu.kiln.dev "hold-two" is forbidden: `
		invalid   = `Claim.gpu.kiln.dev "hold-two" is invalid: `
	)
	run(t, []testCase{
		{name: "two h100 cards", obj: claim(nil)},
		{name: "listed partition", obj: claim(func(c *gpu.Claim) { c.Spec.Accelerators, c.Spec.Partition = nil, "3g.40gb" })},
		{name: "missing type", obj: claim(claimType("nonesuch")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + "spec.type: Invalid value: \"nonesuch\": no such instancetype; `kubectl get instancetypes` lists the ones there are"},
		{name: "type being deleted", obj: claim(claimType("deleting")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "deleting" is being deleted and takes no new claims; choose another type (kubectl get instancetypes)`},
		{name: "held type", obj: claim(claimType("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "held" is on Hold and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`},
		{name: "namespace not selected", obj: claim(claimType("gold")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden + `instancetype "gold" is not offered to namespace "team-a" (its namespaceSelector is kiln.dev/tier=gold); ask a cluster admin, or choose another type`},
		{name: "cluster: namespace selected", cluster: true, obj: claim(claimType("gold"))},
		{name: "cards above maxPerInstance", obj: claim(func(c *gpu.Claim) { c.Spec.Type, c.Spec.Accelerators = "whole", ptr.To(int32(3)) }),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.accelerators: Invalid value: 3: instancetype "whole" allows at most 2 cards per claim`},
		{name: "whole cards on a type without exclusive", obj: claim(claimType("sliced")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.accelerators: Forbidden: instancetype "sliced" does not offer whole cards`},
		{name: "unlisted partition", obj: claim(func(c *gpu.Claim) { c.Spec.Accelerators, c.Spec.Partition = nil, "7g.80gb" }),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.partition: Unsupported value: "7g.80gb": supported values: "3g.40gb", "1g.10gb"`},
		{name: "CPU-only type, cards", obj: claim(claimType("cpu")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.accelerators: Forbidden: instancetype "cpu" is CPU-only and has no accelerators; remove it or choose a GPU type`},
		{name: "CPU-only type, partition", obj: claim(func(c *gpu.Claim) { c.Spec.Type, c.Spec.Accelerators, c.Spec.Partition = "cpu", nil, "1g.10gb" }),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.partition: Forbidden: instancetype "cpu" is CPU-only and has no accelerators; remove it or choose a GPU type`},
		{name: "CPU-only type, nothing asked", obj: claim(func(c *gpu.Claim) { c.Spec.Type, c.Spec.Accelerators = "cpu", nil }),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.type: Forbidden: instancetype "cpu" is CPU-only: there is nothing to reserve`},
		{name: "GPU type, nothing asked", obj: claim(func(c *gpu.Claim) { c.Spec.Accelerators = nil }),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  invalid + `spec.accelerators: Required value: instancetype "h100" has accelerators: ask for whole cards, a slice or a partition`},
		// Only expireAfter may change, and that needs no type.
		{name: "updates are ignored", old: claim(claimType("held")), obj: claim(func(c *gpu.Claim) {
			c.Spec.Type = "held"
			c.Spec.ExpireAfter = &metav1.Duration{}
		})},
		{name: "status subresource is ignored", obj: claim(claimType("nonesuch")), subresource: "status"},
	})
}

func TestValidateOtherObjects(t *testing.T) {
	run(t, []testCase{
		{name: "a Budget", obj: &gpu.Budget{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "team-a"}}},
	})
}

func run(t *testing.T, cases []testCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(t, tc.cluster)
			resourceName := "instances"
			switch tc.obj.(type) {
			case *gpu.Claim:
				resourceName = "claims"
			case *gpu.Budget:
				resourceName = "budgets"
			}
			before := tc.obj.DeepCopyObject()
			ctx := context.Background()
			if tc.stored != nil {
				ctx = instancechange.WithStored(ctx, tc.stored)
			}
			err := p.Validate(ctx, attributes(tc.obj, tc.old, resourceName, tc.subresource), nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				checkError(t, err, tc.wantCode, tc.wantErr)
			}
			if !apiequality.Semantic.DeepEqual(before, tc.obj) {
				t.Errorf("a validating plugin changed the object")
			}
		})
	}
}

func checkError(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted, want %d %s", code, msg)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("not an API error: %v", err)
	}
	if got := status.Status().Code; got != code {
		t.Errorf("code %d, want %d", got, code)
	}
	if got := err.Error(); got != msg {
		t.Errorf("message\n got %s\nwant %s", got, msg)
	}
}
