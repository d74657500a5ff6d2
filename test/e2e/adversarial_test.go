package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/test/localcluster"
)

// The tenant who wants more than their share, with the standard edit
// role in their namespace (issue G). Each test tries one way around Kiln
// and asserts the exact refusal, or reads what runs.

func tenantKiln(t *testing.T, user string) versioned.Interface {
	t.Helper()
	cfg, err := cluster.ConfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tenantClient(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	cfg, err := cluster.ConfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestRawAcceleratorPodRefused (classes 1 and 2): in a tenant namespace,
// a Pod asking for an accelerator resource directly, in any container, in
// requests or limits, or running at Kiln's claim priority, is refused
// unless kiln-controller makes it, even for a cluster admin; other Pods
// are not; an Instance still gets its Pod, which the tenant cannot
// detach or relabel, and a stop removes it.
func TestRawAcceleratorPodRefused(t *testing.T) {
	ns := tenantA
	cs := tenantClient(t, tenantA)
	adminCS, _ := adminClients(t)
	ctx := context.Background()
	gpu := func(n string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceName(n): resource.MustParse("8")}
	}
	pod := func(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	// A namespace an admin guarded with the label alone, without Pod
	// Security.
	noPSA := "e2e-guarded"
	createNamespace(t, noPSA)
	mustKubectl(t, admin(), "", "label", "namespace", noPSA, localcluster.LabelAccelerators+"="+localcluster.AcceleratorsKilnOnly)
	bindEdit(t, noPSA)
	waitFor(t, "the default ServiceAccount of "+noPSA, 30*time.Second,
		func(ctx context.Context) (*corev1.ServiceAccount, error) {
			return adminCS.CoreV1().ServiceAccounts(noPSA).Get(ctx, "default", metav1.GetOptions{})
		},
		func(*corev1.ServiceAccount) bool { return true },
		func(sa *corev1.ServiceAccount) any { return sa.Name })
	in := func(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }
	privileged := func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	devMount := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev"}}}}
	}
	accelMsg := func(name string) string {
		return fmt.Sprintf("pod %s asks for an accelerator resource or a ResourceClaim; in namespace %s accelerators come only through Kiln: create an Instance (kubectl explain instances.spec) or a Claim instead", name, ns)
	}
	// An admin's class at the highest value a user-defined class may have,
	// kiln-claim's.
	mustKubectl(t, admin(), "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: e2e-top}\nvalue: 1000000000\n", "apply", "-f", "-")
	t.Cleanup(func() { kubectl(admin(), "", "delete", "priorityclass", "e2e-top", "--ignore-not-found") })
	for _, tc := range []struct {
		name    string
		client  kubernetes.Interface
		pod     *corev1.Pod
		wantMsg string
	}{
		{"limits of whole cards", cs, pod("raw-limits", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = gpu(localcluster.ResourceGPU)
		}), accelMsg("raw-limits")},
		{"requests of a MIG profile", cs, pod("raw-mig", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = gpu(localcluster.ResourceMIG1g10gb)
			p.Spec.Containers[0].Resources.Limits = gpu(localcluster.ResourceMIG1g10gb)
		}), accelMsg("raw-mig")},
		{"an init container", cs, pod("raw-init", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox:1", Resources: corev1.ResourceRequirements{Limits: gpu(localcluster.ResourceGPU)}}}
		}), accelMsg("raw-init")},
		{"a second container, an AMD card", cs, pod("raw-amd", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "d", Image: "busybox:1", Resources: corev1.ResourceRequirements{Limits: gpu("amd.com/gpu")}})
		}), accelMsg("raw-amd")},
		{"the claim priority", cs, pod("raw-priority", func(p *corev1.Pod) {
			p.Spec.PriorityClassName = gpuv1.ClaimPriorityClassName
		}), "pod raw-priority uses PriorityClass kiln-claim, which only kiln-controller gives to the Pods that hold Claims; remove spec.priorityClassName"},
		{"a cluster admin's Pod", adminCS, pod("raw-admin", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = gpu(localcluster.ResourceGPU)
		}), accelMsg("raw-admin")},

		// Issue O, class 4: Dynamic Resource Allocation.
		{"a DRA claim", cs, pod("raw-dra", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("mine")}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		}), accelMsg("raw-dra")},
		{"a device class's extended resource", cs, pod("raw-deviceclass", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = gpu("deviceclass.resource.kubernetes.io/gpu.example.com")
		}), accelMsg("raw-deviceclass")},

		// Class 3: priority above what any tenant Pod may have.
		{"an admin's class as high as kiln-claim", cs, pod("raw-top", func(p *corev1.Pod) {
			p.Spec.PriorityClassName = "e2e-top"
		}), "pod raw-top: spec.priority 1000000000 (PriorityClass e2e-top) is at or above kiln-claim's, so it could preempt other tenants' Instances and Claims; in namespace " + ns + " use a lower spec.priorityClassName"},

		// Class 1: cards around the device plugin.
		{"variables the container toolkit and sharing layers read", cs, pod("raw-env", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "HOME", Value: "/"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "all"}}
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox:1", Env: []corev1.EnvVar{{Name: "LD_PRELOAD", Value: "/x.so"}}}}
		}), "pod raw-env: spec.containers[].env: container c: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES; container i: LD_PRELOAD: container runtimes and GPU sharing layers read these to hand out or limit accelerators outside the device plugin; in namespace " + ns + " accelerators come only through Kiln: remove them"},
		{"a CDI annotation", cs, pod("raw-cdi", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
		}), "pod raw-cdi: metadata.annotations cdi.k8s.io/gpu ask the container runtime for CDI devices; in namespace " + ns + " accelerators come only through Kiln: remove them"},
		// Pod Security baseline, which tenant namespaces enforce, refuses
		// these first; the policy refuses them where an admin left it out.
		{"a privileged container", cs, pod("raw-privileged", privileged),
			`pods "raw-privileged" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`},
		{"the node's /dev", cs, pod("raw-dev", devMount),
			`pods "raw-dev" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "dev")`},
		{"a privileged container, without Pod Security", cs, pod("raw-privileged", privileged, in(noPSA)),
			"pod raw-privileged: securityContext.privileged of container c gives it every device of the node; in namespace " + noPSA + " set it to false"},
		{"the node's /dev, without Pod Security", cs, pod("raw-dev", devMount, in(noPSA)),
			"pod raw-dev: spec.volumes dev (/dev) mount the host (its /dev among it); in namespace " + noPSA + " Pods may not mount host paths: use a PersistentVolumeClaim"},
		{"a GPU node picked by name", cs, pod("raw-nodename", func(p *corev1.Pod) {
			p.Spec.NodeName = "gpu-h100-0"
		}), "pod raw-nodename: spec.nodeName gpu-h100-0 skips the scheduler and the taints that keep Pods off GPU nodes; in namespace " + ns + " leave it empty (use spec.nodeSelector)"},
		{"the GPU taint tolerated", cs, pod("raw-toleration", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: localcluster.TaintGPU, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}), "pod raw-toleration: spec.tolerations tolerate nvidia.com/gpu, which keeps Pods off GPU nodes; in namespace " + ns + " accelerators come only through Kiln: remove the toleration"},
		{"every taint tolerated", cs, pod("raw-tolerate-all", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}), "pod raw-tolerate-all: spec.tolerations tolerate every taint (empty key, Exists), which keeps Pods off GPU nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.CoreV1().Pods(tc.pod.Namespace).Create(ctx, tc.pod, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("create: %v; want 403 saying %q", err, tc.wantMsg)
			}
		})
	}

	// A Pod without accelerators is the tenant's business.
	plain := pod("plain")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		t.Fatalf("a Pod without accelerators was refused: %v", err)
	}
	t.Cleanup(func() { _ = adminCS.CoreV1().Pods(ns).Delete(context.Background(), "plain", metav1.DeleteOptions{}) })
	// Nor can a debug container bring the variables in later, even an
	// admin's (edit may not add one at all).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		running, err := adminCS.CoreV1().Pods(ns).Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			return err
		}
		running.Spec.EphemeralContainers = append(running.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox:1", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}},
		}})
		_, err = adminCS.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "plain", running, metav1.UpdateOptions{})
		return err
	})
	if want := "pod plain: spec.containers[].env: container debug: NVIDIA_VISIBLE_DEVICES"; !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("a debug container with NVIDIA_VISIBLE_DEVICES: %v; want 403 saying %q", err, want)
	}
	// An update may add tolerations, which would let a Pending Pod onto a
	// GPU node: one that adds the GPU taint's is refused, another is not.
	tolerate := func(key string) string {
		return fmt.Sprintf(`[{"op":"add","path":"/spec/tolerations/-","value":{"key":%q,"operator":"Exists","effect":"NoSchedule"}}]`, key)
	}
	wantTol := "pod plain: spec.tolerations tolerate " + localcluster.TaintGPU + ", which keeps Pods off GPU nodes"
	if _, err := kubectl(tenant(tenantA), "", "patch", "pod", "plain", "-n", ns, "--type=json", "-p", tolerate(localcluster.TaintGPU)); err == nil || !strings.Contains(err.Error(), wantTol) {
		t.Errorf("a patch adding the GPU toleration: %v; want refused: %q", err, wantTol)
	}
	mustKubectl(t, tenant(tenantA), "", "patch", "pod", "plain", "-n", ns, "--type=json", "-p", tolerate("example.com/maintenance"))

	// kiln-controller still makes an Instance's Pod there.
	mustKubectl(t, tenant(tenantA), instance("through-kiln", ns, "h100", "busybox:1"), "create", "-f", "-")
	t.Cleanup(func() { kubectl(tenant(tenantA), "", "delete", "instance", "through-kiln", "-n", ns, "--wait=false") })
	waitInstance(t, ns, "through-kiln", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	p, err := adminCS.CoreV1().Pods(ns).Get(ctx, "through-kiln", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := p.Spec.Containers[0].Resources.Limits[localcluster.ResourceGPU]; q.Value() != 1 {
		t.Fatalf("the Instance's Pod asks for %s cards, want 1", q.String())
	}

	// Class 2: the tenant cannot detach Kiln's Pod from its Instance, so a
	// stop leaves nothing of it running.
	wantDetach := "pod through-kiln holds accelerators Kiln gave it, and only kiln-controller changes it; stop or delete its Instance instead"
	for _, patch := range []struct{ kind, body string }{
		{"json", `[{"op":"remove","path":"/metadata/ownerReferences"}]`},
		{"merge", `{"metadata":{"labels":{"gpu.kiln.dev/instance":"elsewhere"}}}`},
		{"merge", `{"metadata":{"finalizers":["tenant/keep"]}}`},
	} {
		_, err := kubectl(tenant(tenantA), "", "patch", "pod", "through-kiln", "-n", ns, "--type="+patch.kind, "-p", patch.body)
		if err == nil || !strings.Contains(err.Error(), wantDetach) {
			t.Errorf("patch %s: %v; want refused: %q", patch.body, err, wantDetach)
		}
	}
	mustKubectl(t, tenant(tenantA), "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/through-kiln/stop", "-f", "-")
	waitGone(t, "the stopped Instance's Pod", func(ctx context.Context) error {
		_, err := adminCS.CoreV1().Pods(ns).Get(ctx, "through-kiln", metav1.GetOptions{})
		return err
	})
}

// TestAdversarialCharges (classes 2 to 6), as tenant-a through the
// aggregator, each with the exact refusal: a stopped Instance's cards are
// charged until its Pod is gone; a slice that takes more compute than
// memory is charged its compute; a running Instance cannot grow on a type
// put on hold; a Budget created while Instances run binds its very first
// request; an Instance cannot hoard node ports, and stopped Instances and
// their node ports are counted.
func TestAdversarialCharges(t *testing.T) {
	ns := "e2e-adversarial"
	controllerNamespace(t, ns)
	kc := tenant(tenantA)
	// The subtests share the namespace: one whose Instances were still
	// being deleted when the next one's Budget counted failed class 10
	// (used 1 + requested 1 > hard 1), so those before a Budget's wait
	// until their Instances are gone.
	// budget creates a Budget of the given hard limits (YAML) for one
	// subtest.
	budget := func(t *testing.T, ns, name, hard string) {
		t.Helper()
		mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: %s, namespace: %s}\nspec:\n  hard:\n    %s\n", name, ns, hard), "create", "-f", "-")
		t.Cleanup(func() { kubectl(admin(), "", "delete", "budget", name, "-n", ns, "--ignore-not-found") })
	}
	refused := func(t *testing.T, stdin string, want string, args ...string) {
		t.Helper()
		_, err := kubectl(kc, stdin, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("kubectl %s: %v; want refused with %q", strings.Join(args, " "), err, want)
		}
	}

	t.Run("class 5: a Budget created while Instances run", func(t *testing.T) {
		for _, name := range []string{"early-a", "early-b"} {
			mustKubectl(t, kc, instance(name, ns, "l4", "busybox:1"), "create", "-f", "-")
		}
		mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: late, namespace: %s}\nspec: {hard: {accelerators.l4: \"2\"}}\n", ns), "create", "-f", "-")
		refused(t, instance("early-c", ns, "l4", "busybox:1"),
			`exceeds budget "late": accelerators.l4 used 2 + requested 1 > hard 2`, "create", "-f", "-")
		for _, name := range []string{"early-a", "early-b"} {
			mustKubectl(t, kc, "", "delete", "instance", name, "-n", ns)
		}
		mustKubectl(t, admin(), "", "delete", "budget", "late", "-n", ns)
	})

	t.Run("class 2: a stopped or deleted Instance is charged until its Pod is gone", func(t *testing.T) {
		budget(t, ns, "one-l4", "accelerators.l4: \"1\"")
		mustKubectl(t, kc, instance("first", ns, "l4", "busybox:1"), "create", "-f", "-")
		// Gone before the next subtest's Budget counts the namespace.
		t.Cleanup(func() {
			kubectl(kc, "", "delete", "instance", "first", "second", "-n", ns, "--ignore-not-found", "--timeout=90s")
		})
		waitInstance(t, ns, "first", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
		// kwok removes a deleted Pod at once; a kubelet takes up to the
		// grace period. The admin's finalizer keeps it Terminating here.
		adminCS, _ := adminClients(t)
		pods := adminCS.CoreV1().Pods(ns)
		const linger = `{"metadata":{"finalizers":["e2e.kiln.dev/linger"]}}`
		if _, err := pods.Patch(context.Background(), "first", types.MergePatchType, []byte(linger), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		release := func() {
			_, _ = pods.Patch(context.Background(), "first", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		t.Cleanup(release)
		mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/first/stop", "-f", "-")
		waitInstance(t, ns, "first", 30*time.Second, "Stopping", phaseIs(gpuv1.InstanceStopping))

		gpuClient := tenantKiln(t, tenantA)
		second := &gpuv1.Instance{
			ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: ns},
			Spec: gpuv1.InstanceSpec{Type: "l4", Image: "busybox:1",
				Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)}},
		}
		const full = `exceeds budget "one-l4": accelerators.l4 used 1 + requested 1 > hard 1`
		// While the Pod is there, for longer than the Budget loop takes to
		// see the stop, a second card is refused every time.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			_, err := gpuClient.GpuV1alpha1().Instances(ns).Create(context.Background(), second, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), full) {
				t.Fatalf("a second card while the stopped Instance's Pod is still Terminating: %v; want refused with %q", err, full)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Nor can the tenant cut that short by deleting the Instance and
		// taking kiln-controller's finalizer off it.
		mustKubectl(t, kc, "", "delete", "instance", "first", "-n", ns, "--wait=false")
		refused(t, "", `instances.gpu.kiln.dev "first" is forbidden: metadata.finalizers: removing gpu.kiln.dev/instance-controller needs "update" on instances/finalizers, which user "tenant-a" does not have`,
			"patch", "instance", "first", "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		if _, err := gpuClient.GpuV1alpha1().Instances(ns).Create(context.Background(), second, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), full) {
			t.Fatalf("a second card while the deleted Instance's Pod is still Terminating: %v; want refused with %q", err, full)
		}
		// Once the Pod is gone the card is free, and not before.
		release()
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := gpuClient.GpuV1alpha1().Instances(ns).Create(ctx, second, metav1.CreateOptions{})
			switch {
			case err == nil:
				if _, err := pods.Get(ctx, "first", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("a second card was admitted while the stopped Instance's Pod still exists (get: %v)", err)
				}
				return true, nil
			case apierrors.IsForbidden(err) && strings.Contains(err.Error(), full):
				return false, nil
			}
			return false, fmt.Errorf("create of the second Instance: %w", err)
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	// Issue O, class 10: an edit of a stopped Instance used to count it as
	// holding its cards again until kiln-controller looked, uncharged, and
	// a start right after was charged only beyond that: for free.
	t.Run("class 10: an edit of a stopped Instance does not make its next start free", func(t *testing.T) {
		budget(t, ns, "one-card", "accelerators: \"1\"")
		gpuClient := tenantKiln(t, tenantA).GpuV1alpha1().Instances(ns)
		mustKubectl(t, kc, instance("resting", ns, "l4", "busybox:1"), "create", "-f", "-")
		t.Cleanup(func() {
			kubectl(kc, "", "delete", "instance", "resting", "busy", "-n", ns, "--ignore-not-found", "--timeout=90s")
		})
		waitInstance(t, ns, "resting", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
		mustKubectlGPU(t, kc, "stop", "resting", "-n", ns, "--wait")
		mustKubectl(t, kc, instance("busy", ns, "l4", "busybox:1"), "create", "-f", "-")
		const full = `exceeds budget "one-card": accelerators used 1 + requested 1 > hard 1`
		for round := range 5 {
			ctx := context.Background()
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				i, err := gpuClient.Get(ctx, "resting", metav1.GetOptions{})
				if err != nil {
					return err
				}
				i.Spec.Image = fmt.Sprintf("busybox:1.%d", round)
				_, err = gpuClient.Update(ctx, i, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := gpuClient.Start(ctx, "resting", &gpuv1.Instance{}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), full) {
				t.Fatalf("a start right after an edit of the stopped Instance, with the Budget spent on another: %v; want refused with %q", err, full)
			}
		}
	})

	// Issue O, class 2: the garbage collector would take the owner
	// reference off the Pod, and kiln-controller, no longer finding it as
	// the Instance's, would let the Instance and its charge go while the
	// Pod ran on.
	t.Run("class 2: no delete orphans an Instance's or a Claim's Pod", func(t *testing.T) {
		mustKubectl(t, kc, instance("orphan-me", ns, "l4", "busybox:1")+"---\n"+claimManifest("orphan-me", ns, "l4", "  accelerators: 1\n"), "create", "-f", "-")
		t.Cleanup(func() {
			kubectl(kc, "", "delete", "instance,claim", "orphan-me", "-n", ns, "--ignore-not-found", "--timeout=90s")
		})
		for _, kind := range []string{"Instance", "Claim"} {
			want := fmt.Sprintf(`is forbidden: propagationPolicy Orphan would detach the %[1]s's Pod from it, and the Pod would run on uncharged once the %[1]s is gone; delete with propagationPolicy Background (kubectl's default) or Foreground`, kind)
			for _, who := range []string{kc, admin()} {
				if _, err := kubectl(who, "", "delete", strings.ToLower(kind), "orphan-me", "-n", ns, "--cascade=orphan"); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("delete --cascade=orphan of the %s: %v; want refused: %q", kind, err, want)
				}
			}
			refused(t, "", `metadata.finalizers: "orphan" would have the garbage collector detach the `+kind+`'s Pod from it`,
				"patch", strings.ToLower(kind), "orphan-me", "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":["orphan"]}}`)
		}
	})

	// Issue O: the Budget counts an Instance's spec, while its Pod holds
	// what it was built with until it is gone. A shrink would have freed
	// the difference at once for another Instance to spend.
	t.Run("a running Instance cannot free cards its Pod holds by shrinking", func(t *testing.T) {
		mustKubectl(t, kc, strings.Replace(instance("wide", ns, "l4", "busybox:1"), "accelerators: 1", "accelerators: 2", 1), "create", "-f", "-")
		t.Cleanup(func() { kubectl(kc, "", "delete", "instance", "wide", "-n", ns, "--ignore-not-found", "--timeout=90s") })
		waitInstance(t, ns, "wide", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
		const shrink = "spec.resources: Forbidden: the Instance is running or still stopping, and its Pod holds 2 accelerators until it is gone, so its accelerators may grow but not become 1 accelerators; stop it, wait for phase Stopped, then change them and start it"
		refused(t, "", shrink, "patch", "instance", "wide", "-n", ns, "--type=merge", "-p", `{"spec":{"resources":{"accelerators":1}}}`)
		refused(t, "", shrink, "patch", "instance", "wide", "-n", ns, "--type=merge", "-p", `{"spec":{"stopped":true,"resources":{"accelerators":1}}}`)
		mustKubectlGPU(t, kc, "stop", "wide", "-n", ns, "--wait")
		mustKubectl(t, kc, "", "patch", "instance", "wide", "-n", ns, "--type=merge", "-p", `{"spec":{"resources":{"accelerators":1}}}`)
	})

	t.Run("class 6: stopped Instances and their node ports are counted; a stop is never refused", func(t *testing.T) {
		budget(t, ns, "ports", "instances: \"2\"\n    nodeports: \"3\"")
		withPorts := func(name string, n int) string {
			m := cpuInstance(name, ns, "cpu") + "  ports:\n"
			for i := range n {
				m += fmt.Sprintf("  - {name: p%d, port: %d}\n", i, 8000+i)
			}
			return m
		}
		t.Cleanup(func() {
			kubectl(kc, "", "delete", "instance", "web", "web2", "-n", ns, "--ignore-not-found", "--wait=false")
		})
		mustKubectl(t, kc, withPorts("web", 2), "create", "-f", "-")
		waitInstance(t, ns, "web", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
		mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/web/stop", "-f", "-")
		waitInstance(t, ns, "web", 90*time.Second, "Stopped", phaseIs(gpuv1.InstanceStopped))
		adminCS, _ := adminClients(t)
		svc, err := adminCS.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].NodePort == 0 {
			t.Fatalf("the stopped Instance's Service: %v, %v; want it kept with its 2 node ports", svc, err)
		}
		refused(t, withPorts("web2", 2), `exceeds budget "ports": nodeports used 2 + requested 2 > hard 3`, "create", "-f", "-")
		mustKubectl(t, kc, withPorts("web2", 1), "create", "-f", "-")
		refused(t, cpuInstance("third", ns, "cpu"), `exceeds budget "ports": instances used 2 + requested 1 > hard 2`, "create", "-f", "-")
		// Full on every key, a stop and a start still go through: neither
		// raises a charge.
		mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/web2/stop", "-f", "-")
		mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/web/start", "-f", "-")
		refused(t, "", `exceeds budget "ports": nodeports used 3 + requested 1 > hard 3`,
			"patch", "instance", "web", "-n", ns, "--type=json", "-p", `[{"op":"add","path":"/spec/ports/-","value":{"name":"p9","port":9000}}]`)
	})

	t.Run("class 3: a slice is charged its larger share", func(t *testing.T) {
		mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: half, namespace: %s}\nspec: {hard: {accelerators.l4: 500m}}\n", ns), "create", "-f", "-")
		t.Cleanup(func() { kubectl(admin(), "", "delete", "budget", "half", "-n", ns, "--ignore-not-found") })
		greedy := strings.Replace(instance("greedy", ns, "l4", "busybox:1"), "accelerators: 1", "slice: {memoryPercent: 25, coresPercent: 100}", 1)
		refused(t, greedy, `exceeds budget "half": accelerators.l4 used 0 + requested 1 > hard 500m`, "create", "-f", "-")
		fair := strings.Replace(instance("fair", ns, "l4", "busybox:1"), "accelerators: 1", "slice: {memoryPercent: 25, coresPercent: 50}", 1)
		mustKubectl(t, kc, fair, "create", "-f", "-")
		mustKubectl(t, kc, "", "delete", "instance", "fair", "-n", ns)
	})

	t.Run("class 4: no growth on a type on hold", func(t *testing.T) {
		mustKubectl(t, admin(), `apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata: {name: l4-adversarial}
spec:
  accelerator: {vendor: nvidia, model: NVIDIA-L4, memory: 24Gi, maxPerInstance: 4, exclusive: {}}
  resourcesPerCard: {cpu: "1", memory: 1Gi}
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-L4}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
`, "create", "-f", "-")
		t.Cleanup(func() { kubectl(admin(), "", "delete", "instancetype", "l4-adversarial", "--wait=false") })
		mustKubectl(t, kc, instance("small", ns, "l4-adversarial", "busybox:1"), "create", "-f", "-")
		t.Cleanup(func() { kubectl(kc, "", "delete", "instance", "small", "-n", ns, "--wait=false") })
		mustKubectl(t, admin(), "", "patch", "instancetype", "l4-adversarial", "--type=merge", "-p", `{"spec":{"hold":"Hold"}}`)
		want := `instancetype "l4-adversarial" is on Hold and takes no change of what a running Instance asks for`
		// The plugins read types from an informer: give it a moment.
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			_, err := kubectl(kc, "", "patch", "instance", "small", "-n", ns, "--type=merge", "-p", `{"spec":{"resources":{"accelerators":4}}}`)
			return err != nil && strings.Contains(err.Error(), want), nil
		})
		if err != nil {
			t.Fatalf("growing a running Instance on a held type was not refused with %q", want)
		}
	})

	t.Run("class 6: an Instance cannot hoard node ports", func(t *testing.T) {
		var ports strings.Builder
		for i := range 9 {
			fmt.Fprintf(&ports, "  - {name: p%d, port: %d}\n", i, 8000+i)
		}
		hoard := instance("hoard", ns, "cpu", "busybox:1")
		hoard = strings.Replace(hoard, "accelerators: 1", "accelerators: 0", 1) + "  ports:\n" + ports.String()
		refused(t, hoard, "spec.ports: Too many: 9: must have at most 8 items", "create", "-f", "-")
	})
}

// TestPodReasonsCannotWedgeStatus (class 8): a Pod's reason is copied
// into the Instance's Ready condition, whose reason has a strict format
// and whose message a length limit. A Pod failing with a reason such as
// the kubelet's "OutOfnvidia.com/gpu" and a message far over the limit
// (set here as the kubelet would, through kwok's status override) still
// reaches the tenant as a Failed Instance with a sanitised reason and a
// truncated message, instead of a status write refused forever.
func TestPodReasonsCannotWedgeStatus(t *testing.T) {
	ns := "e2e-reasons"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	ctx := context.Background()
	mustKubectl(t, tenant(tenantA), cpuInstance("wedge", ns, "cpu"), "create", "-f", "-")
	waitInstance(t, ns, "wedge", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))

	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "wedge", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[localcluster.CustomStatusAnnotation] = "custom"
	if pod, err = cs.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase, pod.Status.Reason = corev1.PodFailed, "OutOfnvidia.com/gpu"
	pod.Status.Message = "Node didn't have enough resource: nvidia.com/gpu " + strings.Repeat("x", 40*1024)
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// As the tenant reads it.
	instances := tenantKiln(t, tenantA).GpuV1alpha1().Instances(ns)
	inst := waitFor(t, "instance wedge: Failed with the Pod's reason", 60*time.Second,
		func(ctx context.Context) (*gpuv1.Instance, error) {
			return instances.Get(ctx, "wedge", metav1.GetOptions{})
		},
		func(i *gpuv1.Instance) bool { return i.Status.Phase == gpuv1.InstanceFailed },
		func(i *gpuv1.Instance) any { return i.Status.Phase })
	c := meta.FindStatusCondition(inst.Status.Conditions, gpuv1.InstanceConditionReady)
	if c == nil || c.Reason != "OutOfnvidia_com_gpu" {
		t.Fatalf("Ready condition %+v, want reason OutOfnvidia_com_gpu", c)
	}
	const cut = "… (truncated)"
	if len(c.Message) > 32*1024 || !strings.HasSuffix(c.Message, cut) || !strings.HasPrefix(c.Message, "Node didn't have enough resource: nvidia.com/gpu xxx") {
		t.Errorf("Ready message of %d bytes ending %q; want the Pod's message cut to at most 32 KiB, ending %q", len(c.Message), c.Message[max(0, len(c.Message)-20):], cut)
	}
}

// TestInstanceCannotPickCardsByEnv: an Instance's env is rendered after
// the device plugin's, so a variable the container runtime or a sharing
// layer reads would override the allocation it is charged for
// (NVIDIA_VISIBLE_DEVICES=all asks the toolkit for every card of the
// node). A tenant can neither create an Instance with one nor add one by
// a patch: 422 naming the field.
func TestInstanceCannotPickCardsByEnv(t *testing.T) {
	t.Parallel()
	ns := "e2e-runtime-env"
	controllerNamespace(t, ns)
	instances := tenantKiln(t, tenantA).GpuV1alpha1().Instances(ns)
	ctx := context.Background()
	inst := &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "one-slice", Namespace: ns},
		Spec: gpuv1.InstanceSpec{Type: "l4", Image: "busybox:1",
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)},
			Env:       []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}},
	}
	const want = "spec.env[0].name: Forbidden: NVIDIA_VISIBLE_DEVICES is read by NVIDIA's container toolkit"
	_, err := instances.Create(ctx, inst, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("create with NVIDIA_VISIBLE_DEVICES=all: %v; want 422 with %q", err, want)
	}
	inst.Spec.Env = nil
	if _, err := instances.Create(ctx, inst, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"env":[{"name":"LD_PRELOAD","value":"/tmp/unlimit.so"}]}}`)
	_, err = instances.Patch(ctx, "one-slice", types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.env[0].name: Forbidden: LD_PRELOAD is read by the dynamic loader") {
		t.Fatalf("patch adding LD_PRELOAD: %v; want 422 naming spec.env[0].name", err)
	}
}

// TestDeletedCreateFreesItsCharge (issue O, class 10): a Claim created and
// deleted at once, before the Budget's recount could list it, gives its
// charge back as soon as the recount sees the delete, not when the charge
// in flight would have expired (30 s): with a Budget of one card, the
// tenant's next Claim is admitted well before that.
func TestDeletedCreateFreesItsCharge(t *testing.T) {
	t.Parallel()
	ns := "e2e-charge-gone"
	controllerNamespace(t, ns)
	// Its Claims wait, charged, and hold no card.
	emptyPoolType(t, "charge-gone")
	mustKubectl(t, admin(), `apiVersion: gpu.kiln.dev/v1alpha1
kind: Budget
metadata: {name: one, namespace: `+ns+`}
spec: {hard: {accelerators: "1"}}
`, "apply", "-f", "-")
	claims := tenantKiln(t, tenantA).GpuV1alpha1().Claims(ns)
	ctx := context.Background()
	claim := func(name string) *gpuv1.Claim {
		return &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: gpuv1.ClaimSpec{Type: "charge-gone", Accelerators: ptr.To[int32](1)}}
	}
	created, err := claims.Create(ctx, claim("gone"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := claims.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The charge in flight would expire 30 s after the create.
	deadline := created.CreationTimestamp.Add(25 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if _, last = claims.Create(ctx, claim("next"), metav1.CreateOptions{}); last == nil {
			return
		}
		if !apierrors.IsForbidden(last) {
			t.Fatal(last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(ctx, "one", metav1.GetOptions{})
	t.Fatalf("the next Claim was still refused 25 s after the first was created and deleted: %v; budget status %+v", last, b.Status)
}

// TestBudgetSaysWhetherItIsGuarded (issue O, class 9): a Budget in a
// namespace the Pod policy does not guard says so, and kubectl gpu
// capacity warns of it, until an admin labels the namespace.
func TestBudgetSaysWhetherItIsGuarded(t *testing.T) {
	t.Parallel()
	ns := "e2e-unguarded"
	controllerNamespace(t, ns)
	mustKubectl(t, admin(), "apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: blind, namespace: "+ns+"}\nspec: {hard: {accelerators: \"2\"}}\n", "create", "-f", "-")
	guarded := func(status metav1.ConditionStatus) func(*gpuv1.Budget) bool {
		return func(b *gpuv1.Budget) bool {
			c := meta.FindStatusCondition(b.Status.Conditions, gpuv1.BudgetConditionGuarded)
			return c != nil && c.Status == status
		}
	}
	get := func(ctx context.Context) (*gpuv1.Budget, error) {
		return kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(ctx, "blind", metav1.GetOptions{})
	}
	b := waitFor(t, "Guarded=False", 30*time.Second, get, guarded(metav1.ConditionFalse), func(b *gpuv1.Budget) any { return b.Status.Conditions })
	want := "namespace " + ns + " is not labelled gpu.kiln.dev/accelerators=kiln-only, so Pods there may get accelerators without Kiln, and this Budget does not count them; a cluster admin guards it with: kubectl label namespace " + ns + " gpu.kiln.dev/accelerators=kiln-only"
	if c := meta.FindStatusCondition(b.Status.Conditions, gpuv1.BudgetConditionGuarded); c.Message != want || c.Reason != gpuv1.BudgetReasonNamespaceNotGuarded {
		t.Errorf("condition %+v, want reason %s and message %q", c, gpuv1.BudgetReasonNamespaceNotGuarded, want)
	}
	if _, errOut, err := kubectlGPU(t, tenant(tenantA), "capacity", "-n", ns); err != nil || !strings.Contains(errOut, "Warning: budget/blind: "+want) {
		t.Errorf("kubectl gpu capacity: %v; stderr %q, want the warning", err, errOut)
	}
	mustKubectl(t, admin(), "", "label", "namespace", ns, localcluster.LabelAccelerators+"="+localcluster.AcceleratorsKilnOnly)
	waitFor(t, "Guarded=True once labelled", 30*time.Second, get, guarded(metav1.ConditionTrue), func(b *gpuv1.Budget) any { return b.Status.Conditions })
	if _, errOut, err := kubectlGPU(t, tenant(tenantA), "capacity", "-n", ns); err != nil || strings.Contains(errOut, "Warning") {
		t.Errorf("kubectl gpu capacity once guarded: %v; stderr %q, want no warning", err, errOut)
	}
}

// TestChargesHoldUnderRacingWrites (issue O, class 10): two updates of
// one Instance race from the same resourceVersion (one lands, one
// conflicts), while other Instances are created and deleted and the raced
// one is stopped and started again. After every acknowledged write, the
// cards of the Pods bound in the namespace, read from the Pods, stay
// within the Budget.
func TestChargesHoldUnderRacingWrites(t *testing.T) {
	t.Parallel()
	ns := "e2e-charge-race"
	controllerNamespace(t, ns)
	claimPool(t, "race", "NVIDIA-RACE", "race-0")
	const hard = 3
	mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: three, namespace: %s}\nspec: {hard: {accelerators: \"%d\"}}\n", ns, hard), "create", "-f", "-")
	instances := tenantKiln(t, tenantA).GpuV1alpha1().Instances(ns)
	kube, _ := adminClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one := func(name string) *gpuv1.Instance {
		return &gpuv1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: gpuv1.InstanceSpec{Type: "race", Image: "busybox:1", Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)}}}
	}
	if _, err := instances.Create(ctx, one("raced"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubectl(admin(), "", "delete", "instances", "--all", "-n", ns, "--wait=false") })

	// bound reads the cards the namespace's bound Pods ask for.
	var mu sync.Mutex
	var acked, worst int
	check := func(what string) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		cards := 0
		var held []string
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Limits[localcluster.ResourceGPU]; ok {
					cards += int(q.Value())
					held = append(held, fmt.Sprintf("%s:%s", p.Name, q.String()))
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		acked++
		worst = max(worst, cards)
		if cards > hard {
			var state []string
			if insts, err := kilnAdmin(t).GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{}); err == nil {
				for _, i := range insts.Items {
					state = append(state, fmt.Sprintf("%s(uid %s, cards %d, stopped %t, %s %d/%d, deleting %t)", i.Name, i.UID[:8],
						ptr.Deref(i.Spec.Resources.Accelerators, 0), i.Spec.Stopped, i.Status.Phase, i.Status.ObservedGeneration, i.Generation, i.DeletionTimestamp != nil))
				}
			}
			b, _ := kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(ctx, "three", metav1.GetOptions{})
			t.Errorf("after %s: the Pods bound hold %d cards > hard %d: %v; Instances %v; budget %+v", what, cards, hard, held, state, b.Status)
		}
	}

	var wg sync.WaitGroup
	// Two updates of "raced" from one read, to 2 and to 3 cards, then a
	// stop, a shrink back to 1 once Stopped, and a start.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := 0; ctx.Err() == nil && round < 10; round++ {
			cur, err := instances.Get(ctx, "raced", metav1.GetOptions{})
			if err != nil {
				continue
			}
			var race sync.WaitGroup
			for _, n := range []int32{2, 3} {
				race.Add(1)
				go func() {
					defer race.Done()
					u := cur.DeepCopy()
					u.Spec.Resources.Accelerators = ptr.To(n)
					if _, err := instances.Update(ctx, u, metav1.UpdateOptions{}); err == nil {
						check(fmt.Sprintf("raced to %d cards", n))
					}
				}()
			}
			race.Wait()
			if _, err := instances.Stop(ctx, "raced", &gpuv1.Instance{}, metav1.CreateOptions{}); err == nil {
				check("stop")
			}
			_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				i, err := instances.Get(ctx, "raced", metav1.GetOptions{})
				return err == nil && i.Status.Phase == gpuv1.InstanceStopped && i.Status.ObservedGeneration == i.Generation, nil
			})
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				i, err := instances.Get(ctx, "raced", metav1.GetOptions{})
				if err != nil {
					return err
				}
				i.Spec.Resources.Accelerators = ptr.To[int32](1)
				_, err = instances.Update(ctx, i, metav1.UpdateOptions{})
				return err
			})
			if _, err := instances.Start(ctx, "raced", &gpuv1.Instance{}, metav1.CreateOptions{}); err == nil {
				check("start")
			}
		}
	}()
	// Others come and go meanwhile; refusals by the Budget are expected.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 60; i++ {
			name := fmt.Sprintf("other-%d", i%3)
			if _, err := instances.Create(ctx, one(name), metav1.CreateOptions{}); err == nil {
				check("create " + name)
			}
			time.Sleep(100 * time.Millisecond)
			gone := fmt.Sprintf("other-%d", (i+1)%3)
			if err := instances.Delete(ctx, gone, metav1.DeleteOptions{}); err == nil {
				check("delete " + gone)
			}
		}
	}()
	wg.Wait()
	t.Logf("%d acknowledged writes checked; at most %d cards bound at once (hard %d)", acked, worst, hard)
	if acked < 20 {
		t.Errorf("only %d writes were acknowledged; the race did not run", acked)
	}
}
