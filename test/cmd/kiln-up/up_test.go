package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeUpAndDown runs `make up` as a new user would, uses the kubeconfigs
// it writes with the real kubectl, then `make down`, and checks that every
// process it started has ended.
func TestMakeUpAndDown(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "local")
	up := exec.Command("make", "-C", root, "up", "LOCAL_DIR="+dir)
	up.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	up.Stderr = os.Stderr
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			// End make and what it started, and nothing else.
			_ = syscall.Kill(-up.Process.Pid, syscall.SIGTERM)
			<-exited
		}
	})

	ready, scanned := make(chan struct{}), make(chan struct{})
	var printed bytes.Buffer
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printed.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Kiln is up") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case err := <-exited:
		stopped = true
		t.Fatalf("make up ended before the cluster was up: %v", err)
	case <-time.After(10 * time.Minute):
		t.Fatal("make up did not report the cluster up within 10 minutes")
	}

	kubectl := filepath.Join(root, "_output", "bin", "kubectl")
	run := func(kubeconfig string, args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run(filepath.Join(dir, "kubeconfig"), "get", "apiservice", "v1alpha1.gpu.kiln.dev",
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
	down, err := exec.Command("make", "-C", root, "down", "LOCAL_DIR="+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("make down: %v: %s", err, down)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("make up ended with %v after make down", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("make up still running a minute after make down")
	}
	<-scanned
	if !strings.Contains(printed.String(), "tenant-a.kubeconfig") {
		t.Errorf("make up did not say how to use the tenant kubeconfigs:\n%s", printed.String())
	}
	// Every component was started with paths under dir; none may be left.
	if left := processesMentioning(t, dir); len(left) > 0 {
		t.Errorf("still running after make down: %v", left)
	}
	if _, err := os.Stat(dir + ".pid"); !os.IsNotExist(err) {
		t.Errorf("the launcher's PID file outlived it: %v", err)
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
