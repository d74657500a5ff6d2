// Package install installs Kiln into a local cluster from its own images
// with its own manifests, as README's "Running in a cluster" tells an
// operator to, and runs the README's tenant walk-through through it. Every
// Kiln component is a Pod on real-0, the real node: the control plane's
// kube-apiserver reaches Kiln's Pods only as the aggregator reaches any
// extension server's, by their addresses inside the node's network.
//
// It starts a cluster of its own and real-0 with it, so it runs after the
// other end-to-end tests (make e2e), never beside them: a machine has one
// real node.
package install

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/test/images"
	"kiln.dev/kiln/test/localcluster"
)

var (
	repoRoot, _ = filepath.Abs(filepath.Join("..", ".."))
	binDir      = filepath.Join(repoRoot, "_output", "bin")
	imageDir    = filepath.Join(repoRoot, "_output", "images")
)

const (
	kilnNamespace = "kiln-system"
	tenantA       = "tenant-a"
	// etcdVolume is the local PersistentVolume the etcd StatefulSet's claim
	// binds: the local cluster has no provisioner.
	etcdVolume = "kiln-etcd-data"
)

// needRealNode skips on a host that cannot run real-0, saying why; with
// KILN_TESTS_MUST_RUN (CI) it fails instead.
func needRealNode(t *testing.T) {
	t.Helper()
	why := ""
	if os.Getuid() != 0 {
		why = "the real node needs root"
	}
	if why == "" {
		return
	}
	if os.Getenv("KILN_TESTS_MUST_RUN") != "" {
		t.Fatalf("KILN_TESTS_MUST_RUN, and %s", why)
	}
	t.Skip(why)
}

// kilnImages are the tarballs `make images` wrote, and of `make
// images-next` those the upgrade changes.
func kilnImages(t *testing.T) []string {
	t.Helper()
	tars, err := filepath.Glob(filepath.Join(imageDir, "kiln", "*.tar"))
	if err != nil || len(tars) == 0 {
		t.Fatalf("no image tarballs in %s (%v); run make images", filepath.Join(imageDir, "kiln"), err)
	}
	for _, w := range workloads {
		next := filepath.Join(imageDir, "kiln-next", w.image+".tar")
		if _, err := os.Stat(next); err != nil {
			t.Fatalf("%v; run make images-next", err)
		}
		tars = append(tars, next)
	}
	return tars
}

// TestInstall: `kiln-apiserver serving-cert` and `kubectl apply -k` bring
// Kiln up on real-0 from its images; the APIService turns Available
// through the in-cluster Service; a tenant with "edit" walks through the
// README's steps; `kubectl delete -k` leaves no APIService, Pod or policy
// behind, and keeps etcd's volume.
func TestInstall(t *testing.T) {
	needRealNode(t)
	tars := kilnImages(t)
	dir := filepath.Join(repoRoot, "_output", "install")
	// dayTwo writes it anew; a failed run leaves none to be read as its.
	_ = os.Remove(filepath.Join(repoRoot, "_output", "install-report.txt"))
	volume := filepath.Join(dir + "-etcd")
	// Left by an earlier run: the volume is kept on purpose by uninstall.
	if err := os.RemoveAll(volume); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	policy, err := writeAuditPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir,
		// Who wrote a tenant's Pods and Claims, when and from which Pod's
		// address: what an over-commit under load is read from.
		APIServerFlags: []string{"--audit-policy-file=" + policy,
			"--audit-log-path=" + filepath.Join(dir, "logs", "audit.log"), "--audit-log-maxbackup=1"},
		BinDir:            binDir,
		RepoRoot:          repoRoot,
		Tenants:           []string{tenantA, "tenant-b", "tenant-c"},
		Nodes:             []localcluster.NodeSpec{},
		Log:               testLog{t},
		RealNode:          true,
		ImageDir:          imageDir,
		Images:            tars,
		KilnInCluster:     true,
		PersistentVolumes: []*corev1.PersistentVolume{etcdPV(volume)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	t.Logf("cluster with real-0 up in %s", time.Since(start).Round(time.Second))
	// A local volume is a directory that must exist. It is root's, as a
	// provisioner's would be: the StatefulSet's fsGroup gives it to etcd.
	if err := os.MkdirAll(volume, 0o755); err != nil {
		t.Fatal(err)
	}

	k := kubectlAs{t: t, kubectl: cluster.Kubectl}
	admin := k.with(cluster.AdminKubeconfig)
	layer := writeInstall(t, cluster, filepath.Join(dir, "install"))

	start = time.Now()
	admin.must("", "apply", "-k", layer)
	for _, w := range []string{"deployment/kiln-apiserver", "deployment/kiln-controller", "statefulset/kiln-etcd", "daemonset/kiln-node-agent"} {
		admin.must("", "-n", kilnNamespace, "rollout", "status", w, "--timeout=5m")
	}
	admin.must("", "wait", "--for=condition=Available", "apiservice/v1alpha1.gpu.kiln.dev", "--timeout=3m")
	t.Logf("kubectl apply -k to APIService Available: %s", time.Since(start).Round(time.Second))
	// kube-apiserver adds the group to its discovery a moment after the
	// APIService turns Available; until then kubectl cannot map Kiln's
	// kinds ("no matches for kind"). The README's install waits the same
	// way.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		out, err := admin.run("", "api-resources", "--api-group=gpu.kiln.dev", "-o", "name")
		return err == nil && strings.Contains(out, "instancetypes.gpu.kiln.dev"), nil
	})
	if err != nil {
		t.Fatalf("gpu.kiln.dev never appeared in discovery after the APIService turned Available: %v", err)
	}
	t.Logf("kubectl apply -k to gpu.kiln.dev in discovery: %s", time.Since(start).Round(time.Second))
	pods := admin.must("", "get", "pods", "-n", kilnNamespace, "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}{\"\\n\"}{end}")
	t.Logf("Kiln's Pods:\n%s", pods)
	for _, line := range strings.Split(strings.TrimSpace(pods), "\n") {
		if f := strings.Fields(line); len(f) != 3 || f[1] != localcluster.RealNodeName || f[2] != "Running" {
			t.Errorf("Pod %q: want Running on %s", line, localcluster.RealNodeName)
		}
	}
	if n := strings.Count(pods, "kiln-apiserver-"); n != 2 {
		t.Errorf("%d kiln-apiserver Pods, want the Deployment's 2", n)
	}

	walkThrough(t, admin, k.with(cluster.KubeconfigFor(tenantA)))
	keepLogs(cluster, filepath.Join(dir, "logs", "kiln-pods-walkthrough.log"))

	prev, next := versionOf(t, "kiln"), versionOf(t, "kiln-next")
	dayTwo(t, cluster, admin, prev, next)
	keepLogs(cluster, filepath.Join(dir, "logs", "kiln-pods-day2.log"))

	uninstall(t, admin, layer)
}

// writeInstall runs `kiln-apiserver serving-cert` over test/install/overlay
// with the images of `make images`, and writes the layer over it that
// names this machine's paths: real-0's fake cards for the node agent, and
// the controller's holder and sshd images. It returns that layer.
func writeInstall(t *testing.T, cluster *localcluster.Cluster, dir string) string {
	t.Helper()
	creds := filepath.Join(dir, "base")
	out, err := exec.Command(filepath.Join(binDir, "kiln-apiserver"), "serving-cert", "--dir", creds,
		"--base", filepath.Join(repoRoot, "test", "install", "overlay"), "--registry", "kiln.local").CombinedOutput()
	if err != nil {
		t.Fatalf("kiln-apiserver serving-cert: %v\n%s", err, out)
	}
	holder := imageNamed(t, "kiln", "kiln-holder")
	var agentArgs []string
	for _, a := range cluster.RealNodeAgentArgs() {
		agentArgs = append(agentArgs, fmt.Sprintf("    - op: add\n      path: /spec/template/spec/containers/0/args/-\n      value: %q\n", a))
	}
	layer := fmt.Sprintf(`# Written by test/install: this machine's paths, over the install.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- base
patches:
- target: {kind: Deployment, name: kiln-controller}
  patch: |
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --claim-holder-image=%[1]s
    - op: replace
      path: /spec/template/spec/containers/0/args/2
      value: --ssh-image=kiln.local/ssh:1
- target: {kind: DaemonSet, name: kiln-node-agent}
  patch: |
    - op: add
      path: /spec/template/spec/containers/0/args
      value: []
%[2]s    # Its fake cards are device nodes it makes, which takes CAP_MKNOD;
    # real cards are the driver's.
    - op: add
      path: /spec/template/spec/containers/0/securityContext/capabilities/add
      value: [MKNOD]
    - op: replace
      path: /spec/template/spec/volumes/1/hostPath/path
      value: %[3]s
    - op: replace
      path: /spec/template/spec/containers/0/volumeMounts/1/mountPath
      value: %[3]s
    - op: add
      path: /spec/template/spec/volumes/-
      value: {name: real-node, hostPath: {path: %[4]s, type: Directory}}
    - op: add
      path: /spec/template/spec/containers/0/volumeMounts/-
      value: {name: real-node, mountPath: %[4]s}
    - op: add
      path: /spec/template/spec/volumes/-
      value: {name: inventory, hostPath: {path: %[5]s, type: Directory}}
    - op: add
      path: /spec/template/spec/containers/0/volumeMounts/-
      value: {name: inventory, mountPath: %[5]s, readOnly: true}
`, holder, strings.Join(agentArgs, ""), filepath.Join(cluster.RealNodeDir(), "kubelet", "pod-resources"),
		cluster.RealNodeDir(), filepath.Dir(cluster.InventoryFile(localcluster.RealNodeName)))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(layer), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// imageNamed is the name and tag of the image for name that `make
// images` wrote to dir under _output/images.
func imageNamed(t *testing.T, dir, name string) string {
	t.Helper()
	table := filepath.Join(imageDir, dir, "images.txt")
	out, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "kiln.local/"+name+":") {
			return f
		}
	}
	t.Fatalf("no image %s in %s", name, table)
	return ""
}

// versionOf is the version the build in dir was stamped with: its
// images' tag.
func versionOf(t *testing.T, dir string) string {
	_, tag, _ := strings.Cut(imageNamed(t, dir, "kiln-apiserver"), ":")
	return tag
}

func etcdPV(path string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: etcdVolume},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{localcluster.RealNodeName}}},
			}}}},
		},
	}
}

// walkThrough is the README's walk-through on real-0, through the
// in-cluster Kiln: the admin's type, a tenant's Instance Ready with its
// cards (and only those in its container), its logs, stop and start, ssh
// into another, and a Claim of the cards left.
func walkThrough(t *testing.T, admin, tenant kubectlAs) {
	admin.must(readFile(t, filepath.Join(repoRoot, "artifacts", "examples", "real-node.yaml")), "apply", "-f", "-")
	if out := tenant.must("", "get", "instancetypes"); !strings.Contains(out, "real") {
		t.Fatalf("kubectl get instancetypes as %s: %q, want type real", tenantA, out)
	}
	tenant.must(readFile(t, filepath.Join(repoRoot, "artifacts", "examples", "real-instance.yaml")), "apply", "-f", "-")
	inst := eventually(t, "instance hello-real Ready on "+localcluster.RealNodeName+" with 2 cards", 3*time.Minute, tenant.instance("hello-real"), func(i *gpuv1.Instance) bool {
		return i != nil && i.Status.Phase == gpuv1.InstanceReady && i.Status.NodeName == localcluster.RealNodeName && len(i.Status.Allocations) == 2
	})
	var want []string
	for _, a := range inst.Status.Allocations {
		want = append(want, fmt.Sprintf("nvidia%d", a.Index))
	}
	slices.Sort(want)
	logs := eventually(t, "kubectl gpu logs hello-real", time.Minute, func() (string, error) { return tenant.gpu("logs", "hello-real", "-n", tenantA) },
		func(s string) bool { return strings.Contains(s, "NVIDIA_VISIBLE_DEVICES=") })
	var seen []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.HasPrefix(line, "nvidia") {
			seen = append(seen, line)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, want) {
		t.Errorf("hello-real's container sees %v under /dev, want its allocations %v", seen, want)
	}

	tenant.mustGPU("stop", "hello-real", "-n", tenantA, "--wait")
	eventually(t, "instance/hello-real"+" "+"{.status.phase}", 3*time.Minute, tenant.jsonPath("instance/hello-real", "{.status.phase}"), func(s string) bool { return s == "Stopped" })
	tenant.mustGPU("start", "hello-real", "-n", tenantA, "--wait")
	eventually(t, "instance/hello-real"+" "+"{.status.phase} {.status.nodeName}", 3*time.Minute, tenant.jsonPath("instance/hello-real", "{.status.phase} {.status.nodeName}"), func(s string) bool { return s == "Ready "+localcluster.RealNodeName })

	// kubectl gpu ssh: real ssh to the node port on real-0's address,
	// which kube-proxy forwards to the sidecar the installed controller
	// adds. Ready says the Pod is; the port forwards once kube-proxy has
	// its endpoint, so the first tries may be refused.
	key, authorized, err := images.SSHKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tenant.must("", "create", "secret", "generic", "keys", "-n", tenantA, "--from-literal=authorized_keys="+authorized)
	tenant.must(fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata:
  name: box
  namespace: tenant-a
spec:
  type: real
  image: %s
  resources: {accelerators: 1}
  command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
  ssh: {authorizedKeysSecret: keys}
  ports: [{name: ssh, port: 22}]
`, images.WorkloadImage), "apply", "-f", "-")
	eventually(t, "instance box Ready on "+localcluster.RealNodeName+" with a node port", 3*time.Minute, tenant.instance("box"), func(i *gpuv1.Instance) bool {
		return i != nil && i.Status.Phase == gpuv1.InstanceReady && i.Status.NodeName == localcluster.RealNodeName &&
			len(i.Status.Ports) == 1 && i.Status.Ports[0].NodePort != 0
	})
	eventually(t, "kubectl gpu ssh box --exec echo ok", time.Minute, func() (string, error) {
		out, err := tenant.gpu("ssh", "box", "-n", tenantA, "--exec", "-i", key, "--",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
			"-o", "LogLevel=ERROR", "echo", "ok")
		return strings.TrimSpace(out), err
	}, func(out string) bool { return out == "ok" })
	tenant.must("", "delete", "instance/box", "secret/keys", "-n", tenantA, "--wait")

	tenant.must(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Claim
metadata:
  name: rest
  namespace: tenant-a
spec:
  type: real
  accelerators: 2
  expireAfter: 1h
`, "apply", "-f", "-")
	eventually(t, "claim/rest"+" "+"{.status.phase} {.status.nodeName}", 3*time.Minute, tenant.jsonPath("claim/rest", "{.status.phase} {.status.nodeName}"), func(s string) bool { return s == "Bound "+localcluster.RealNodeName })

	// Uninstalling takes Kiln's API away: its objects go first, and with
	// them the Pods they own in tenant namespaces.
	tenant.must("", "delete", "instance/hello-real", "claim/rest", "-n", tenantA, "--wait")
}

// uninstall deletes what apply -k made and checks what is left: no
// APIService, no Kiln Pod in any namespace, no admission policy of Kiln's,
// and etcd's volume, kept on purpose.
func uninstall(t *testing.T, admin kubectlAs, layer string) {
	admin.must("", "delete", "-k", layer, "--wait", "--timeout=3m")
	if out, err := admin.run("", "get", "apiservice", "v1alpha1.gpu.kiln.dev"); err == nil {
		t.Errorf("the APIService is still there after delete -k: %s", out)
	}
	if out := admin.must("", "get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=kiln-controller", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("Kiln's Pods after delete -k: %s", out)
	}
	if out := admin.must("", "get", "namespace", kilnNamespace, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("namespace %s after delete -k --wait: %s", kilnNamespace, out)
	}
	out := admin.must("", "get", "validatingadmissionpolicies,validatingadmissionpolicybindings,clusterroles,clusterrolebindings,priorityclasses,flowschemas,prioritylevelconfigurations", "-o", "name")
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "kiln") {
			t.Errorf("left by delete -k: %s", line)
		}
	}
	if phase := admin.must("", "get", "pv", etcdVolume, "-o", "jsonpath={.status.phase}"); phase != "Released" {
		t.Errorf("etcd's volume is %q after delete -k, want Released (kept, with its data)", phase)
	}
}

// writeAuditPolicy writes the policy of the audit log: the writes to Pods,
// and the reads and writes of Instances, Claims and Budgets, in the
// tenants' namespaces, at Metadata level.
func writeAuditPolicy(dir string) (string, error) {
	const policy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  namespaces: [tenant-a, tenant-b, tenant-c]
  verbs: [create, update, patch, delete, deletecollection]
  resources:
  - group: ""
    resources: [pods]
- level: Metadata
  namespaces: [tenant-a, tenant-b, tenant-c]
  verbs: [get, create, update, patch, delete, deletecollection]
  resources:
  - group: gpu.kiln.dev
    resources: [claims, claims/status, instances, instances/status, instances/start, instances/stop, budgets, budgets/status]
- level: None
`
	// Beside dir, which the cluster's start empties.
	file := dir + "-audit-policy.yaml"
	return file, os.WriteFile(file, []byte(policy), 0o644)
}

// keepLogs writes the logs of Kiln's Pods to file: they go with real-0,
// or with the uninstall.
func keepLogs(cluster *localcluster.Cluster, file string) {
	out, _ := exec.Command(cluster.Kubectl, "--kubeconfig", cluster.AdminKubeconfig, "logs", "-n", kilnNamespace,
		"-l", "app.kubernetes.io/name in (kiln-apiserver,kiln-controller,kiln-node-agent,kiln-etcd)",
		"--all-containers", "--prefix", "--timestamps", "--tail=-1").CombinedOutput()
	_ = os.WriteFile(file, out, 0o644)
}

type kubectlAs struct {
	t          *testing.T
	kubectl    string
	kubeconfig string
}

func (k kubectlAs) with(kubeconfig string) kubectlAs {
	k.kubeconfig = kubeconfig
	return k
}

func (k kubectlAs) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command(k.kubectl, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

func (k kubectlAs) must(stdin string, args ...string) string {
	k.t.Helper()
	out, err := k.run(stdin, args...)
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

// mustGPU runs the kubectl plugin, found on the PATH as kubectl does.
func (k kubectlAs) mustGPU(args ...string) string {
	k.t.Helper()
	out, err := k.gpu(args...)
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

func (k kubectlAs) gpu(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "kubectl-gpu"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl gpu %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// eventually gets a value every second until ok holds of it, and returns
// it; after timeout the test fails with the last value and error.
func eventually[T any](t *testing.T, what string, timeout time.Duration, get func() (T, error), ok func(T) bool) T {
	t.Helper()
	var last T
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		if last, err = get(); err == nil && ok(last) {
			return last
		}
	}
	t.Fatalf("%s: %+v (%v) after %v", what, last, err, timeout)
	return last
}

// jsonPath is a JSONPath of an object of tenant-a's.
func (k kubectlAs) jsonPath(object, path string) func() (string, error) {
	return func() (string, error) { return k.run("", "get", object, "-n", tenantA, "-o", "jsonpath="+path) }
}

// instance is an Instance of tenant-a's.
func (k kubectlAs) instance(name string) func() (*gpuv1.Instance, error) {
	return func() (*gpuv1.Instance, error) {
		out, err := k.run("", "get", "instance", name, "-n", tenantA, "-o", "json")
		if err != nil {
			return nil, err
		}
		var inst gpuv1.Instance
		return &inst, json.Unmarshal([]byte(out), &inst)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
