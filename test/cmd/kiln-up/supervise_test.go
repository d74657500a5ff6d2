package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMakeUpRestartsWhatExits: while a tenant keeps creating Instances,
// kiln-controller, kiln-apiserver, kube-apiserver and etcd are each killed
// with SIGKILL, as a crash or the OOM killer would. The launcher logs each
// exit with its reason and starts the component again; Kiln and the
// controller reconnect on their own and the APIService is Available again
// after each; the objects survive, and every create that was acknowledged
// is there and reconciled at the end.
func TestMakeUpRestartsWhatExits(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "local")
	kubectl := filepath.Join(root, "_output", "bin", "kubectl")
	admin, tenantA := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "tenant-a.kubeconfig")
	run := func(kubeconfig, stdin string, args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig=" + kubeconfig, "--request-timeout=20s"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	mustRun := func(kubeconfig string, args ...string) string {
		t.Helper()
		out, err := run(kubeconfig, "", args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}

	up := makeUp(t, root, dir)
	launcher, err := os.ReadFile(dir + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	launcherPID, err := strconv.Atoi(strings.TrimSpace(string(launcher)))
	if err != nil {
		t.Fatal(err)
	}
	mustRun(admin, "apply", "-f", filepath.Join(root, "artifacts", "examples", "instancetypes.yaml"))

	// The load: a stopped CPU Instance created every 300 ms (stopped, so
	// hundreds fit on the one CPU node), each acknowledged one recorded.
	var (
		mu    sync.Mutex
		acked []string
		tries int
	)
	stop, loadDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			name := fmt.Sprintf("load-%d", i)
			manifest := fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Instance\nmetadata: {name: %s}\nspec: {type: cpu, image: busybox, stopped: true, resources: {accelerators: 0}}\n", name)
			_, err := run(tenantA, manifest, "create", "-f", "-")
			mu.Lock()
			tries++
			if err == nil {
				acked = append(acked, name)
			}
			mu.Unlock()
		}
	}()

	for _, name := range []string{"kiln-controller", "kiln-apiserver", "kube-apiserver", "etcd"} {
		pid := childOf(t, launcherPID, name)
		if pid == 0 {
			t.Fatalf("no %s under the launcher (PID %d)", name, launcherPID)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var again int
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if again = childOf(t, launcherPID, name); again != 0 && again != pid {
				break
			}
		}
		if again == 0 || again == pid {
			t.Fatalf("%s (PID %d) was not started again within 2 minutes:\n%s", name, pid, up.output())
		}
		out := up.output()
		if !strings.Contains(out, fmt.Sprintf("supervisor: %s (PID %d) exited after", name, pid)) || !strings.Contains(out, "signal: killed") ||
			!strings.Contains(out, fmt.Sprintf("supervisor: %s restarted as PID %d", name, again)) {
			t.Errorf("the launcher did not log the exit and restart of %s:\n%s", name, out)
		}
		// Back in service through the aggregator before the next kill.
		var last string
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			if last, err = run(tenantA, "", "get", "instances", "-o", "name"); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("tenant-a cannot list Instances 3 minutes after %s was killed: %v: %s", name, err, last)
		}
		// kube-apiserver checks the APIService on its own schedule: it
		// must come back Available without anyone touching it.
		var available string
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			if available, _ = run(admin, "", "get", "apiservice", "v1alpha1.gpu.kiln.dev",
				"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`); available == "True" {
				break
			}
		}
		if available != "True" {
			t.Fatalf("APIService v1alpha1.gpu.kiln.dev Available=%q 2 minutes after %s was killed", available, name)
		}
	}
	time.Sleep(2 * time.Second) // a few creates after the last restart
	close(stop)
	<-loadDone

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d of %d creates acknowledged", len(acked), tries)
	if len(acked) == 0 {
		t.Fatal("no create was acknowledged")
	}
	// Every acknowledged Instance is there and the controller, restarted
	// itself, has reconciled it.
	mustRun(tenantA, "wait", "--for=jsonpath={.status.phase}=Stopped", "instances", "--all", "--timeout=3m")
	have := map[string]bool{}
	for _, n := range strings.Fields(mustRun(tenantA, "get", "instances", "-o", `jsonpath={range .items[*]}{.metadata.name}{" "}{end}`)) {
		have[n] = true
	}
	for _, n := range acked {
		if !have[n] {
			t.Errorf("acknowledged Instance %s is gone", n)
		}
	}
	up.down(t)
}

// childOf is the PID of the launcher's child running the named binary; 0
// if there is none.
func childOf(t *testing.T, parent int, binary string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if filepath.Base(args[0]) != binary {
			continue
		}
		return pid
	}
	return 0
}
