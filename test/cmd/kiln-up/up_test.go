package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kiln.dev/kiln/test/localcluster"
)

// TestMakeUpAndDown runs `make up` as a new user would, uses the kubeconfigs
// it writes with the real kubectl, applies the examples as the README does,
// then `make down`, and checks that every process it started has ended.
// The next `make up` resumes that cluster: the examples are still there
// and Ready, on the same devices, and a kubeconfig copied before still
// works. `make up FRESH=1` then starts an empty one.
func TestMakeUpAndDown(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "local")
	kubectl := filepath.Join(root, "_output", "bin", "kubectl")
	run := func(kubeconfig string, args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	admin, tenantA := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "tenant-a.kubeconfig")
	examples := filepath.Join(root, "artifacts", "examples")

	// real-0 joins where the host can run it, as on the project's machines.
	realNode := localcluster.RealNodeUnsupported() == ""
	realNodeUp := func() {
		t.Helper()
		if realNode {
			run(admin, "wait", "--for=condition=Ready", "node/"+localcluster.RealNodeName, "--timeout=1m")
			run(admin, "wait", `--for=jsonpath={.status.allocatable.nvidia\.com/gpu}=4`, "node/"+localcluster.RealNodeName, "--timeout=1m")
		}
	}

	up := makeUp(t, root, dir)
	realNodeUp()
	if got := run(admin, "get", "apiservice", "v1alpha1.gpu.kiln.dev",
		"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`); got != "True" {
		t.Errorf("APIService Available = %q", got)
	}
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		kc := filepath.Join(dir, tenant+".kubeconfig")
		if got := run(kc, "config", "view", "--minify", "-o", "jsonpath={.contexts[0].context.namespace}"); got != tenant {
			t.Errorf("%s's kubeconfig defaults to namespace %q", tenant, got)
		}
		if got := run(kc, "auth", "can-i", "create", "instances.gpu.kiln.dev"); got != "yes" {
			t.Errorf("%s may not create instances in its namespace: %s", tenant, got)
		}
		run(kc, "get", "instances")
	}
	// The README's order: the catalogue and the Budget are the admin's.
	run(admin, "apply", "-f", filepath.Join(examples, "instancetypes.yaml"))
	run(tenantA, "apply", "-f", filepath.Join(examples, "instances.yaml"))
	run(admin, "apply", "-f", filepath.Join(examples, "claim-and-budget.yaml"))
	ready := func() {
		t.Helper()
		run(tenantA, "wait", "--for=condition=Ready", "instances", "--all", "--timeout=3m")
		run(tenantA, "wait", "--for=jsonpath={.status.phase}=Bound", "claim/big-run", "--timeout=2m")
		run(tenantA, "wait", "--for=jsonpath={.status.phase}=Bound", "pvc/models", "--timeout=1m")
	}
	ready()
	// Each Instance by name, UID and devices, once every one has devices.
	identity := func(kubeconfig string) string {
		t.Helper()
		var got string
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			got = run(kubeconfig, "get", "instances", "-o",
				`jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}:{.status.allocations[*].device}{"\n"}{end}`)
			if lines := strings.Split(got, "\n"); len(lines) == 3 && !strings.Contains(got, ":\n") && !strings.HasSuffix(got, ":") {
				return got
			}
		}
		t.Fatalf("tenant-a's three Instances of instances.yaml have no devices within a minute:\n%s", got)
		return ""
	}
	before := identity(tenantA)
	// A kubeconfig kept elsewhere must still work after a resume.
	kept := filepath.Join(t.TempDir(), "tenant-a.kubeconfig")
	data, err := os.ReadFile(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kept, data, 0o600); err != nil {
		t.Fatal(err)
	}
	up.down(t)
	if !strings.Contains(up.output(), "tenant-a.kubeconfig") {
		t.Errorf("make up did not say how to use the tenant kubeconfigs:\n%s", up.output())
	}

	up = makeUp(t, root, dir)
	if !strings.Contains(up.output(), "Resumed") {
		t.Errorf("the second make up did not say it resumed:\n%s", up.output())
	}
	ready()
	realNodeUp()
	if after := identity(kept); after != before {
		t.Errorf("after a resume the Instances (name=uid:devices) are\n%s\nwant\n%s", after, before)
	}
	run(admin, "get", "instancetype", "h100", "l4", "cpu")
	run(kept, "get", "budget/team-a", "secret/my-ssh-keys")
	up.down(t)

	up = makeUp(t, root, dir, "FRESH=1")
	if got := run(admin, "get", "instances,claims,budgets", "-A", "-o", "name"); got != "" {
		t.Errorf("make up FRESH=1 kept objects:\n%s", got)
	}
	if got := run(admin, "get", "instancetypes", "-o", "name"); got != "" {
		t.Errorf("make up FRESH=1 kept the catalogue:\n%s", got)
	}
	if out, err := exec.Command(kubectl, "--kubeconfig="+kept, "get", "instances").CombinedOutput(); err == nil {
		t.Errorf("a kubeconfig of the discarded cluster still works on the new one: %s", out)
	}
	up.down(t)
}

// TestMakeUpRefusesUnknownDir: a directory without the launcher's state,
// as an older launcher left it, is not wiped unasked, and the message
// says how to start anew.
func TestMakeUpRefusesUnknownDir(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "local")
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-C", root, "up", "LOCAL_DIR="+dir).CombinedOutput()
	if err == nil {
		t.Fatalf("make up resumed a directory it did not write:\n%s", out)
	}
	if !strings.Contains(string(out), "make up FRESH=1") {
		t.Errorf("make up's refusal does not say how to start anew:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
		t.Errorf("make up removed what it refused to resume: %v", err)
	}
}

// launch is one `make up` running.
type launch struct {
	root, dir string
	cmd       *exec.Cmd
	exited    chan error
	scanned   chan struct{}
	stopped   bool
	mu        sync.Mutex
	printed   bytes.Buffer
}

// makeUp runs `make up` on dir and returns once it says Kiln is up.
func makeUp(t *testing.T, root, dir string, vars ...string) *launch {
	t.Helper()
	l := &launch{root: root, dir: dir, exited: make(chan error, 1), scanned: make(chan struct{})}
	l.cmd = exec.Command("make", append([]string{"-C", root, "up", "LOCAL_DIR=" + dir}, vars...)...)
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	l.cmd.Stderr = os.Stderr
	stdout, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.exited <- l.cmd.Wait() }()
	t.Cleanup(func() {
		if !l.stopped {
			// End make and what it started, and nothing else.
			_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGTERM)
			<-l.exited
		}
	})
	ready := make(chan struct{})
	go func() {
		defer close(l.scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l.mu.Lock()
			l.printed.WriteString(sc.Text() + "\n")
			l.mu.Unlock()
			if strings.HasPrefix(sc.Text(), "Kiln is up") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case err := <-l.exited:
		l.stopped = true
		t.Fatalf("make up %s ended before the cluster was up: %v\n%s", strings.Join(vars, " "), err, l.output())
	case <-time.After(10 * time.Minute):
		t.Fatal("make up did not report the cluster up within 10 minutes")
	}
	return l
}

func (l *launch) output() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.printed.String()
}

// down runs `make down` and checks that the launcher and everything it
// started are gone.
func (l *launch) down(t *testing.T) {
	t.Helper()
	out, err := exec.Command("make", "-C", l.root, "down", "LOCAL_DIR="+l.dir).CombinedOutput()
	if err != nil {
		t.Fatalf("make down: %v: %s", err, out)
	}
	select {
	case err := <-l.exited:
		l.stopped = true
		if err != nil {
			t.Errorf("make up ended with %v after make down", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("make up still running a minute after make down")
	}
	<-l.scanned
	// Every component was started with paths under dir; none may be left.
	if left := processesMentioning(t, l.dir); len(left) > 0 {
		t.Errorf("still running after make down: %v", left)
	}
	if _, err := os.Stat(l.dir + ".pid"); !os.IsNotExist(err) {
		t.Errorf("the launcher's PID file outlived it: %v", err)
	}
	if localcluster.RealNodeUnsupported() == "" {
		if err := localcluster.RealNodeLeftovers(); err != nil {
			t.Errorf("the real node left on the host after make down: %v", err)
		}
	}
}

func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		found = append(found, e.Name()+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return found
}
