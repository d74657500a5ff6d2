package kubectlgpu

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func TestStartStop(t *testing.T) {
	for _, tc := range []struct {
		name        string
		objects     []*v1alpha1.Instance
		args        []string
		wantOut     string
		wantErr     string
		wantStopped map[string]bool
	}{
		{name: "stop one", objects: []*v1alpha1.Instance{instance("nb")}, args: []string{"stop", "nb"},
			wantOut: "instance.gpu.kiln.dev/nb stopped\n", wantStopped: map[string]bool{"nb": true}},
		{name: "start two", objects: []*v1alpha1.Instance{instance("a", stopped), instance("b", stopped)}, args: []string{"start", "a", "b"},
			wantOut: "instance.gpu.kiln.dev/a started\ninstance.gpu.kiln.dev/b started\n", wantStopped: map[string]bool{"a": false, "b": false}},
		{name: "-o name", objects: []*v1alpha1.Instance{instance("nb")}, args: []string{"stop", "nb", "-o", "name"},
			wantOut: "instance.gpu.kiln.dev/nb\n"},
		{name: "-o jsonpath", objects: []*v1alpha1.Instance{instance("nb")}, args: []string{"stop", "nb", "-o", "jsonpath={.kind} {.spec.stopped}"},
			wantOut: "Instance true"},
		{name: "a missing one does not stop the others", objects: []*v1alpha1.Instance{instance("nb")}, args: []string{"stop", "ghost", "nb"},
			wantOut:     "instance.gpu.kiln.dev/nb stopped\n",
			wantErr:     `instance "ghost" not found in namespace "tenant-a"; list them with kubectl get instances -n tenant-a`,
			wantStopped: map[string]bool{"nb": true}},
		{name: "no name", args: []string{"start"}, wantErr: "requires at least 1 arg(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objects []runtime.Object
			for _, o := range tc.objects {
				objects = append(objects, o)
			}
			f := newFixture(t, objects)
			out, _, err := f.run(t, append(tc.args, "-n", ns)...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if out != tc.wantOut {
				t.Errorf("output %q, want %q", out, tc.wantOut)
			}
			for name, want := range tc.wantStopped {
				got, err := f.kiln.GpuV1alpha1().Instances(ns).Get(context.Background(), name, metav1.GetOptions{})
				if err != nil || got.Spec.Stopped != want {
					t.Errorf("instance %s: %v, stopped %v, want %v", name, err, got != nil && got.Spec.Stopped, want)
				}
			}
		})
	}
}

// TestStartWaits: --wait returns once the controller reports Ready for the
// generation the start wrote, with a line per phase on stderr.
func TestStartWaits(t *testing.T) {
	f := newFixture(t, objs(instance("nb", stopped)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Once the plugin watches, play the controller.
		select {
		case <-f.watching:
		case <-time.After(10 * time.Second):
			return
		}
		for _, phase := range []v1alpha1.InstancePhase{v1alpha1.InstanceStarting, v1alpha1.InstanceReady} {
			inst, _ := f.kiln.GpuV1alpha1().Instances(ns).Get(context.Background(), "nb", metav1.GetOptions{})
			inst.Status.Phase, inst.Status.ObservedGeneration = phase, inst.Generation
			inst.Status.Message = map[v1alpha1.InstancePhase]string{v1alpha1.InstanceStarting: "waiting for the scheduler", v1alpha1.InstanceReady: "running on gpu-0"}[phase]
			_, _ = f.kiln.GpuV1alpha1().Instances(ns).UpdateStatus(context.Background(), inst, metav1.UpdateOptions{})
		}
	}()
	out, errOut, err := f.run(t, "start", "nb", "--wait", "--timeout=20s", "-n", ns)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if out != "instance.gpu.kiln.dev/nb started\n" {
		t.Errorf("output %q", out)
	}
	want := "instance/nb: Stopped: stopped; start it with kubectl gpu start, or the instances/start subresource\n" +
		"instance/nb: Starting: waiting for the scheduler\n" +
		"instance/nb: Ready: running on gpu-0\n"
	if errOut != want {
		t.Errorf("progress %q, want %q", errOut, want)
	}
}

// TestWaitTimesOut: the error says where the Instance stands and what to
// run next.
func TestWaitTimesOut(t *testing.T) {
	f := newFixture(t, objs(instance("nb", stopped)))
	_, _, err := f.run(t, "start", "nb", "--wait", "--timeout=300ms", "-n", ns)
	want := `instance "nb" in namespace "tenant-a" is not Ready after 300ms (Stopped: stopped; start it with kubectl gpu start, or the instances/start subresource); kubectl gpu why nb -n tenant-a says why`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestWaitStopsOnFailure: a Failed Instance ends the wait for Ready.
func TestWaitStopsOnFailure(t *testing.T) {
	f := newFixture(t, objs(instance("nb", func(i *v1alpha1.Instance) {
		i.Status.Phase, i.Status.Message, i.Generation, i.Status.ObservedGeneration = v1alpha1.InstanceFailed, "UnexpectedAdmissionError: no device", 2, 2
	})))
	_, _, err := f.run(t, "start", "nb", "--wait", "--timeout=10s", "-n", ns)
	if err == nil || !strings.Contains(err.Error(), "failed: UnexpectedAdmissionError: no device; kubectl gpu why nb") {
		t.Errorf("error %v", err)
	}
}
