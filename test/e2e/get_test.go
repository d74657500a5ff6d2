package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestGet lists the examples every way the README shows: all namespaces,
// the gpu category, wide output and a custom field selector.
func TestGet(t *testing.T) {
	t.Parallel()
	ns := "e2e-get"
	createNamespace(t, ns)
	examples := strings.ReplaceAll(readFile(t, filepath.Join(repoRoot, "artifacts", "examples", "instances.yaml")), "namespace: tenant-a", "namespace: "+ns)
	mustKubectl(t, admin(), examples, "apply", "-f", "-")

	all := mustKubectl(t, admin(), "", "get", "instances.gpu", "-A")
	for _, name := range []string{"train", "notebook", "inference"} {
		if !hasRow(all, ns, name) {
			t.Errorf("get instances.gpu -A lacks %s/%s:\n%s", ns, name, all)
		}
	}
	if rows := parseTable(t, all); rows[0]["NAMESPACE"] == "" || rows[0]["TYPE"] == "" {
		t.Errorf("get instances.gpu -A has no NAMESPACE or TYPE column:\n%s", all)
	}

	cat := mustKubectl(t, admin(), "", "get", "gpu", "-n", ns)
	for _, w := range []string{"instance.gpu.kiln.dev/train", "instance.gpu.kiln.dev/notebook", "instancetype.gpu.kiln.dev/h100"} {
		if !strings.Contains(cat, w) {
			t.Errorf("get gpu -n %s lacks %s:\n%s", ns, w, cat)
		}
	}

	wide := parseTable(t, mustKubectl(t, admin(), "", "get", "inst", "-n", ns, "-o", "wide"))
	if _, ok := wide[0]["PORTS"]; !ok {
		t.Errorf("-o wide has no PORTS column: %v", wide[0])
	}
	for _, row := range wide {
		if row["NAME"] == "notebook" && (row["TYPE"] != "l4" || row["ACCELERATORS"] == "") {
			t.Errorf("notebook row: %v", row)
		}
		// One snapshot of each object: an Instance that has a phase and
		// is not Ready says why.
		if reason, ok := row["REASON"]; !ok || (row["PHASE"] != "Ready" && row["PHASE"] != "<none>" && reason == "<none>") {
			t.Errorf("-o wide row without a REASON for its phase: %v", row)
		}
	}

	h100 := mustKubectl(t, admin(), "", "get", "instances", "-n", ns, "--field-selector", "spec.type=h100",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.spec.type}{"\n"}{end}`)
	if got, want := sortedLines(h100), "inference=h100\ntrain=h100"; got != want {
		t.Errorf("--field-selector spec.type=h100 returned\n%s\nwant\n%s", got, want)
	}
	notH100 := mustKubectl(t, admin(), "", "get", "instances", "-n", ns, "--field-selector", "spec.type!=h100", "-o", "name")
	if got := strings.TrimSpace(notH100); got != "instance.gpu.kiln.dev/notebook" {
		t.Errorf("--field-selector spec.type!=h100 returned %q", got)
	}
}

// TestWatch holds `kubectl get -w` open through the aggregator for longer
// than kube-apiserver's 60 s request timeout and checks it sees every change
// made meanwhile, in order.
func TestWatch(t *testing.T) {
	t.Parallel()
	ns := "e2e-watch"
	createNamespace(t, ns)

	cmd := exec.Command(cluster.Kubectl, "--kubeconfig="+admin(), "get", "instances", "-n", ns,
		"--watch-only", "--output-watch-events", "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()

	type event struct{ typ, name, rv string }
	var mu sync.Mutex
	var seen []event
	go func() {
		dec := json.NewDecoder(bufio.NewReader(stdout))
		for {
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Metadata struct {
						Name            string `json:"name"`
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
				} `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, event{ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion})
			mu.Unlock()
		}
	}()
	// The watch is established once it reports a change: touch a stopped
	// sentinel Instance (no Pod, no capacity) until it does. Its events
	// may sit between the others; the check below allows that.
	sentinel := strings.Replace(instance("w0-sentinel", ns, "h100", "busybox:1"), "spec:\n", "spec:\n  stopped: true\n", 1)
	mustKubectl(t, admin(), sentinel, "create", "-f", "-")
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		established := slices.ContainsFunc(seen, func(e event) bool { return e.name == "w0-sentinel" })
		mu.Unlock()
		if !established {
			mustKubectl(t, admin(), "", "label", "instance", "w0-sentinel", "-n", ns, "--overwrite", "touched="+strconv.FormatInt(time.Now().UnixNano(), 10))
		}
		return established, nil
	})
	if err != nil {
		t.Fatalf("the watch reported no change of the sentinel within 60 s: %s", stderr.String())
	}

	// Each change reads back the resourceVersion its own write produced
	// (a later GET could see the controller's writes on top). Labels and
	// annotations are set by patch, which prints the server's answer:
	// kubectl label -o once printed a resourceVersion older than its write.
	rvOf := "-o=jsonpath={.metadata.resourceVersion}"
	changes := []func() event{
		func() event {
			return event{"ADDED", "w1", mustKubectl(t, admin(), instance("w1", ns, "h100", "busybox:1"), "create", "-f", "-", rvOf)}
		},
		func() event {
			return event{"ADDED", "w2", mustKubectl(t, admin(), instance("w2", ns, "l4", "busybox:1"), "create", "-f", "-", rvOf)}
		},
		func() event {
			return event{"MODIFIED", "w1", mustKubectl(t, admin(), "", "patch", "instance", "w1", "-n", ns, "--type=merge", "-p", `{"metadata":{"labels":{"stage":"one"}}}`, rvOf)}
		},
		func() event {
			return event{"MODIFIED", "w2", mustKubectl(t, admin(), "", "patch", "instance", "w2", "-n", ns, "--type=merge", "-p", `{"spec":{"image":"busybox:2"}}`, rvOf)}
		},
		func() event {
			return event{"MODIFIED", "w1", mustKubectl(t, admin(), "", "patch", "instance", "w1", "-n", ns, "--type=merge", "-p", `{"metadata":{"annotations":{"note":"after-sixty-seconds"}}}`, rvOf)}
		},
		func() event {
			mustKubectl(t, admin(), "", "delete", "instance", "w2", "-n", ns)
			return event{"DELETED", "w2", ""}
		},
		func() event {
			return event{"ADDED", "w3", mustKubectl(t, admin(), instance("w3", ns, "h100", "busybox:1"), "create", "-f", "-", rvOf)}
		},
		func() event {
			mustKubectl(t, admin(), "", "delete", "instance", "w1", "-n", ns)
			return event{"DELETED", "w1", ""}
		},
	}
	// Spread the changes over 90 s: the last ones come after the 60 s at
	// which kube-apiserver would cut an ordinary request.
	start := time.Now()
	hold := 90 * time.Second
	var want []event
	for i, change := range changes {
		at := time.Duration(i+1) * hold / time.Duration(len(changes)+1)
		time.Sleep(time.Until(start.Add(at)))
		want = append(want, change())
	}
	time.Sleep(time.Until(start.Add(hold)))
	select {
	case err := <-exited:
		t.Fatalf("kubectl get -w ended after %s: %v: %s", time.Since(start).Round(time.Second), err, stderr.String())
	default:
	}
	// Every change must be seen, in order, with the resourceVersion it
	// produced. Other writers (the controller, once it runs) may add
	// MODIFIED events of their own in between.
	var got []event
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		got = append(got[:0], seen...)
		mu.Unlock()
		return isSubsequence(want, got, func(w, g event) bool {
			return w.typ == g.typ && w.name == g.name && (w.rv == "" || w.rv == g.rv)
		}), nil
	})
	if err != nil {
		t.Fatalf("watch did not see every change in order:\ngot  %v\nwant %v", got, want)
	}
	for _, g := range got {
		if g.typ != "ADDED" && g.typ != "MODIFIED" && g.typ != "DELETED" {
			t.Errorf("unexpected watch event %v", g)
		}
	}
}

// isSubsequence reports whether want occurs in got in order.
func isSubsequence[T any](want, got []T, match func(w, g T) bool) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && match(want[i], g) {
			i++
		}
	}
	return i == len(want)
}

func hasRow(table, namespace, name string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == namespace && f[1] == name {
			return true
		}
	}
	return false
}

func sortedLines(s string) string {
	lines := strings.Fields(s)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
