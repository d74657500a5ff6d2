package kubectlgpu

import (
	"bytes"
	"context"
	"flag"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	kilnfake "kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the output")

const ns = "tenant-a"

// fixture is a plugin wired to fake clients.
type fixture struct {
	kiln *kilnfake.Clientset
	kube *kubefake.Clientset
	// logs is the log each Instance's stream returns; logOpts records
	// the options of the last request.
	logs    map[string]string
	logErr  error
	logOpts *v1alpha1.InstanceLogOptions
	// watching is closed once the plugin watches Instances.
	watching chan struct{}
	// ssh records what --exec ran.
	ssh []string
}

func newFixture(t *testing.T, kiln []runtime.Object, kube ...runtime.Object) *fixture {
	t.Helper()
	// No kubeconfig of the machine's: -n decides the namespace.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", "/home/user")
	// NodeDevices are served by a reactor: the field-managed tracker has
	// no schema for them.
	nodeDevices := map[string]*v1alpha1.NodeDevices{}
	kiln = slices.DeleteFunc(slices.Clone(kiln), func(o runtime.Object) bool {
		nd, ok := o.(*v1alpha1.NodeDevices)
		if ok {
			nodeDevices[nd.Name] = nd
		}
		return ok
	})
	f := &fixture{kiln: kilnfake.NewClientset(kiln...), kube: kubefake.NewClientset(kube...), logs: map[string]string{}}
	f.kiln.PrependReactor("get", "nodedevices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.GetAction).GetName()
		if nd, ok := nodeDevices[name]; ok {
			return true, nd.DeepCopy(), nil
		}
		return true, nil, apierrors.NewNotFound(v1alpha1.Resource("nodedevices"), name)
	})
	f.kiln.PrependReactor("list", "nodedevices", func(k8stesting.Action) (bool, runtime.Object, error) {
		list := &v1alpha1.NodeDevicesList{}
		for _, name := range slices.Sorted(maps.Keys(nodeDevices)) {
			list.Items = append(list.Items, *nodeDevices[name].DeepCopy())
		}
		return true, list, nil
	})
	f.kiln.PrependReactor("create", "instances", f.lifecycle)
	f.watching = make(chan struct{})
	var once sync.Once
	f.kiln.PrependWatchReactor("instances", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := f.kiln.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(f.watching) })
		return true, w, err
	})
	return f
}

// lifecycle answers instances/start and instances/stop as the registry
// does: spec.stopped set, generation bumped on a change, nothing stored on
// a dry run.
func (f *fixture) lifecycle(a k8stesting.Action) (bool, runtime.Object, error) {
	create := a.(k8stesting.CreateActionImpl)
	sub := a.GetSubresource()
	if sub != "start" && sub != "stop" {
		return false, nil, nil
	}
	gvr := v1alpha1.SchemeGroupVersion.WithResource("instances")
	obj, err := f.kiln.Tracker().Get(gvr, a.GetNamespace(), create.Name)
	if err != nil {
		return true, nil, err
	}
	inst := obj.(*v1alpha1.Instance).DeepCopy()
	if stopped := sub == "stop"; inst.Spec.Stopped != stopped {
		inst.Spec.Stopped = stopped
		inst.Generation++
	}
	if len(create.CreateOptions.DryRun) > 0 {
		return true, inst, nil
	}
	return true, inst, f.kiln.Tracker().Update(gvr, inst, a.GetNamespace())
}

func (f *fixture) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := &Options{
		IO: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		NewClients: func() (*Clients, error) {
			return &Clients{Kiln: f.kiln, Kube: f.kube, Logs: f.openLog}, nil
		},
		RunSSH: func(args []string) error { f.ssh = args; return nil },
	}
	cmd := NewCommand(o)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func (f *fixture) openLog(_ context.Context, namespace, name string, opts *v1alpha1.InstanceLogOptions) (io.ReadCloser, error) {
	f.logOpts = opts
	if f.logErr != nil {
		return nil, f.logErr
	}
	l, ok := f.logs[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(v1alpha1.Resource("instances"), name)
	}
	return io.NopCloser(strings.NewReader(l)), nil
}

// instance is a one-card h100 Instance in ns, Ready on gpu-0.
func instance(name string, mutate ...func(*v1alpha1.Instance)) *v1alpha1.Instance {
	i := &v1alpha1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       v1alpha1.InstanceSpec{Type: "h100", Image: "pytorch", Resources: v1alpha1.InstanceResources{Accelerators: ptr.To[int32](1)}},
		Status: v1alpha1.InstanceStatus{
			Phase: v1alpha1.InstanceReady, Message: "running on gpu-0", ObservedGeneration: 1, NodeName: "gpu-0",
			HostIPs:    []string{"192.0.2.10", "10.0.0.10"},
			Conditions: []metav1.Condition{{Type: v1alpha1.InstanceConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady"}},
		},
	}
	for _, m := range mutate {
		m(i)
	}
	return i
}

func pending(message string) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) {
		i.Status.Phase, i.Status.Message, i.Status.NodeName, i.Status.HostIPs = v1alpha1.InstancePending, message, "", nil
		i.Status.Conditions = []metav1.Condition{{Type: v1alpha1.InstanceConditionReady, Status: metav1.ConditionFalse, Reason: "Unschedulable", Message: message}}
	}
}

func stopped(i *v1alpha1.Instance) {
	i.Spec.Stopped = true
	i.Status.Phase, i.Status.Message, i.Status.NodeName, i.Status.HostIPs = v1alpha1.InstanceStopped, "stopped; start it with kubectl gpu start, or the instances/start subresource", "", nil
	i.Status.Conditions = []metav1.Condition{{Type: v1alpha1.InstanceConditionReady, Status: metav1.ConditionFalse, Reason: "Stopped"}}
}

// h100 is an InstanceType of 80Gi cards with two partition profiles.
func h100(free int32, mutate ...func(*v1alpha1.InstanceType)) *v1alpha1.InstanceType {
	t := &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100"},
		Spec: v1alpha1.InstanceTypeSpec{Accelerator: &v1alpha1.Accelerator{
			Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"), MaxPerInstance: 8,
			Partitions: []v1alpha1.PartitionProfile{{Name: "1g.10gb", Memory: resource.MustParse("10Gi")}, {Name: "3g.40gb", Memory: resource.MustParse("40Gi")}},
		}},
		Status: v1alpha1.InstanceTypeStatus{Phase: v1alpha1.InstanceTypeActive, Capacity: v1alpha1.InstanceTypeCapacity{
			Nodes: 2, Cards: 16, FreeCards: free,
			Partitions: []v1alpha1.PartitionCapacity{{Name: "1g.10gb", Total: 7, Free: 7}, {Name: "3g.40gb", Total: 2, Free: 1}},
		}},
	}
	for _, m := range mutate {
		m(t)
	}
	return t
}

func cpuType() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu"},
		Status: v1alpha1.InstanceTypeStatus{Phase: v1alpha1.InstanceTypeActive, Capacity: v1alpha1.InstanceTypeCapacity{Nodes: 1}}}
}

// budget has hard and used as "key=value" pairs.
func budget(name string, hard, used map[string]string) *v1alpha1.Budget {
	list := func(m map[string]string) v1alpha1.BudgetResourceList {
		l := v1alpha1.BudgetResourceList{}
		for k, v := range m {
			l[v1alpha1.BudgetResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	return &v1alpha1.Budget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.BudgetSpec{Hard: list(hard)}, Status: v1alpha1.BudgetStatus{Hard: list(hard), Used: list(used)}}
}

// pod is the Instance's Pod, controlled by it.
func pod(inst *v1alpha1.Instance, scheduled *corev1.PodCondition) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: inst.Name, Namespace: inst.Namespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Instance", Name: inst.Name, UID: inst.UID, Controller: ptr.To(true)}}}}
	if scheduled != nil {
		p.Status.Conditions = []corev1.PodCondition{*scheduled}
	}
	return p
}

func objs(o ...runtime.Object) []runtime.Object { return o }
