package instanceprivilege

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/instancechange"
)

// fakeAuthorizer allows the requests listed in allow, keyed as
// "user verb group resource/subresource namespace", and records what it
// was asked.
type fakeAuthorizer struct {
	allow  map[string]bool
	reason string // given with a refusal
	err    error
	asked  []string
}

func (f *fakeAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.asked = append(f.asked, fmt.Sprintf("%s %s %s/%s %s/%s %s ns=%s name=%s resourceRequest=%v",
		a.GetUser().GetName(), a.GetVerb(), a.GetAPIGroup(), a.GetAPIVersion(), a.GetResource(), a.GetSubresource(),
		a.GetPath(), a.GetNamespace(), a.GetName(), a.IsResourceRequest()))
	key := strings.Join([]string{a.GetUser().GetName(), a.GetVerb(), a.GetAPIGroup(), a.GetResource() + "/" + a.GetSubresource(), a.GetNamespace()}, " ")
	if f.allow[key] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, f.reason, f.err
}

// ConditionsAwareAuthorize is what the interface asks of an authorizer
// without conditions.
func (f *fakeAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(f.Authorize(ctx, a))
}

func (f *fakeAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func TestValidateInitialization(t *testing.T) {
	p := New()
	if err := p.ValidateInitialization(); err == nil || err.Error() != "InstancePrivilege needs an authorizer" {
		t.Errorf("error %v", err)
	}
	p.SetAuthorizer(&fakeAuthorizer{})
	if err := p.ValidateInitialization(); err != nil {
		t.Errorf("with an authorizer: %v", err)
	}
}

// instance is a running Instance in team-a with a ConfigMap volume.
func instance(mutate ...func(*gpu.Instance)) *gpu.Instance {
	inst := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a"},
		Spec: gpu.InstanceSpec{
			Type:  "h100",
			Image: "nvcr.io/nvidia/pytorch:24.05-py3",
			Volumes: []gpu.InstanceVolume{
				{Name: "config", MountPath: "/etc/train", ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "train"}}},
			},
		},
	}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

func privileged(i *gpu.Instance) { i.Spec.Privileged = true }

func hostPath(name, path string) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		i.Spec.Volumes = append(i.Spec.Volumes, gpu.InstanceVolume{Name: name, MountPath: "/host/" + name, HostPath: &corev1.HostPathVolumeSource{Path: path}})
	}
}

func readOnlyVolumes(i *gpu.Instance) {
	for j := range i.Spec.Volumes {
		i.Spec.Volumes[j].ReadOnly = true
	}
}

func hostPathType(t corev1.HostPathType) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		for j := range i.Spec.Volumes {
			if hp := i.Spec.Volumes[j].HostPath; hp != nil {
				hp.Type = &t
			}
		}
	}
}

func withImage(image string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Image = image }
}

func withEnv(name, value string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Env = append(i.Spec.Env, corev1.EnvVar{Name: name, Value: value}) }
}

func withPort(name string, port int32) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Ports = append(i.Spec.Ports, gpu.InstancePort{Name: name, Port: port}) }
}

func withArgs(args ...string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Args = args }
}

// secretFirst puts a Secret volume ahead of the others.
func secretFirst(i *gpu.Instance) {
	i.Spec.Volumes = append([]gpu.InstanceVolume{{Name: "token", MountPath: "/var/run/token", Secret: &corev1.SecretVolumeSource{SecretName: "token"}}}, i.Spec.Volumes...)
}

func relabelled(i *gpu.Instance) { i.Labels = map[string]string{"team": "vision"} }

func stopped(i *gpu.Instance) { i.Spec.Stopped = true }

func inNamespace(ns string) func(*gpu.Instance) { return func(i *gpu.Instance) { i.Namespace = ns } }

func TestValidate(t *testing.T) {
	const (
		forbidden = `instances.gpu.kiln.dev "train" is forbidden: `
		grant     = `a cluster admin can grant it by binding the ClusterRole kiln:privileged-instances`
	)
	asked := func(userName, ns string) string {
		return userName + " use gpu.kiln.dev/v1alpha1 instances/privileged  ns=" + ns + " name=train resourceRequest=true"
	}
	allow := map[string]bool{
		"admin use gpu.kiln.dev instances/privileged team-a":    true,
		"tenant-a use gpu.kiln.dev instances/privileged team-b": true,
		// Not the verb or subresource the plugin asks for.
		"tenant-a create gpu.kiln.dev instances/privileged team-a": true,
		"tenant-a use gpu.kiln.dev instances/ team-a":              true,
	}
	cases := []struct {
		name        string
		user        string
		old         *gpu.Instance // nil for a create
		obj         *gpu.Instance
		resource    string // instances unless set
		subresource string
		stored      *gpu.Instance // the Instance a start replaces
		reason      string
		authzErr    error
		wantAsked   []string
		wantCode    int32 // 0: admitted
		wantErr     string
	}{
		{name: "unprivileged Instance is not asked about", user: "tenant-a", obj: instance()},
		{name: "privileged, allowed user", user: "admin", obj: instance(privileged),
			wantAsked: []string{asked("admin", "team-a")}},
		{name: "privileged, denied user", user: "tenant-a", obj: instance(privileged),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "privileged, user allowed in that namespace only", user: "tenant-a", obj: instance(privileged, inNamespace("team-b")),
			wantAsked: []string{asked("tenant-a", "team-b")}},
		{name: "hostPath, allowed user", user: "admin", obj: instance(hostPath("dev", "/dev/infiniband")),
			wantAsked: []string{asked("admin", "team-a")}},
		{name: "hostPath, denied user", user: "tenant-a", obj: instance(hostPath("dev", "/dev/infiniband")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[1].hostPath (/dev/infiniband) needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "privileged and hostPath: asked once, the first named", user: "tenant-a", obj: instance(hostPath("dev", "/dev/infiniband"), privileged),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "the authorizer's reason is passed on", user: "tenant-a", obj: instance(privileged), reason: "no RBAC policy matched",
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant + ` (no RBAC policy matched)`},
		{name: "the authorizer fails", user: "tenant-a", obj: instance(privileged), authzErr: errors.New("webhook unreachable"),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusInternalServerError,
			wantErr:   `Internal error occurred: asking whether "tenant-a" may use instances/privileged: webhook unreachable`},

		// Updates.
		{name: "tenant relabels an admin-made privileged Instance", user: "tenant-a",
			old: instance(privileged, hostPath("dev", "/dev/infiniband")), obj: instance(privileged, hostPath("dev", "/dev/infiniband"), relabelled)},
		{name: "tenant stops an admin-made privileged Instance", user: "tenant-a",
			old: instance(privileged), obj: instance(privileged, stopped)},
		{name: "tenant drops privilege", user: "tenant-a",
			old: instance(privileged, hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/dev/infiniband"))},
		// Issue O, class 6: the grant was for that Instance, not for what
		// else it may mount, read or expose.
		{name: "tenant adds a volume ahead of an admin-made hostPath", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/dev/infiniband"), secretFirst),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[2].hostPath (/dev/infiniband) with a changed spec needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant adds a variable to an admin-made privileged Instance", user: "tenant-a",
			old: instance(privileged), obj: instance(privileged, withEnv("TOKEN_FILE", "/host/etc/shadow")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged with a changed spec needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant opens a port of an admin-made privileged Instance", user: "tenant-a",
			old: instance(privileged), obj: instance(privileged, withPort("shell", 4444)),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged with a changed spec needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant starts and relabels an admin-made privileged Instance", user: "tenant-a",
			old: instance(privileged, stopped), obj: instance(privileged, relabelled)},
		{name: "update adding a hostPath", user: "tenant-a",
			old: instance(), obj: instance(hostPath("dev", "/dev/infiniband")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[1].hostPath (/dev/infiniband) needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		// The message names what the update adds, not what was there.
		{name: "update adding a second hostPath", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/dev/infiniband"), hostPath("root", "/")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[2].hostPath (/) needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "update pointing a hostPath elsewhere", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[1].hostPath (/) needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "update making it privileged", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/dev/infiniband"), privileged),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		// What the privilege is granted for changes (issue G, class 4).
		{name: "tenant makes an admin-made hostPath writable", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband"), readOnlyVolumes), obj: instance(hostPath("dev", "/dev/infiniband")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[1].hostPath (/dev/infiniband) needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant changes the type of an admin-made hostPath", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/dev/infiniband"), hostPathType(corev1.HostPathCharDev)),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[1].hostPath (/dev/infiniband) needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant swaps the image of an admin-made privileged Instance", user: "tenant-a",
			old: instance(privileged), obj: instance(privileged, withImage("attacker/miner:1")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.privileged with a changed spec needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant changes the args of an admin-made hostPath Instance", user: "tenant-a",
			old: instance(hostPath("dev", "/dev/infiniband")), obj: instance(hostPath("dev", "/dev/infiniband"), withArgs("-c", "cat /host/dev/*")),
			wantAsked: []string{asked("tenant-a", "team-a")},
			wantCode:  http.StatusForbidden,
			wantErr:   forbidden + `spec.volumes[1].hostPath (/dev/infiniband) with a changed spec needs "use" on instances/privileged in namespace "team-a", which user "tenant-a" does not have; ` + grant},
		{name: "tenant swaps the image of an unprivileged Instance", user: "tenant-a",
			old: instance(), obj: instance(withImage("other:1"))},
		{name: "update making it privileged, allowed user", user: "admin",
			old: instance(), obj: instance(privileged),
			wantAsked: []string{asked("admin", "team-a")}},

		{name: "status subresource is ignored", user: "tenant-a", old: instance(), obj: instance(privileged), subresource: "status"},
		// instances/start: the registry passes the new Instance as the
		// object and the stored one in the context.
		{name: "instances/start adds no privilege", user: "tenant-a", stored: instance(privileged, stopped), obj: instance(privileged), subresource: "start"},
		{name: "a start adds no privilege", user: "tenant-a", old: instance(privileged, stopped), obj: instance(privileged)},
		{name: "other resources are ignored", user: "tenant-a", obj: instance(privileged), resource: "claims"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			authz := &fakeAuthorizer{allow: allow, reason: tc.reason, err: tc.authzErr}
			p := New()
			p.SetAuthorizer(authz)
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			resourceName := tc.resource
			if resourceName == "" {
				resourceName = "instances"
			}
			op, opts, old := admission.Create, runtime.Object(&metav1.CreateOptions{}), runtime.Object(nil)
			if tc.old != nil {
				op, opts, old = admission.Update, &metav1.UpdateOptions{}, tc.old
			}
			attrs := admission.NewAttributesRecord(tc.obj, old, v1alpha1.SchemeGroupVersion.WithKind("Instance"), tc.obj.Namespace, tc.obj.Name,
				v1alpha1.SchemeGroupVersion.WithResource(resourceName), tc.subresource, op, opts, false, &user.DefaultInfo{Name: tc.user})

			ctx := context.Background()
			if tc.stored != nil {
				ctx = instancechange.WithStored(ctx, tc.stored)
			}
			err := p.Validate(ctx, attrs, nil)
			if got, want := strings.Join(authz.asked, "\n"), strings.Join(tc.wantAsked, "\n"); got != want {
				t.Errorf("asked\n%s\nwant\n%s", got, want)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("admitted, want %d %s", tc.wantCode, tc.wantErr)
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("not an API error: %v", err)
			}
			if got := status.Status().Code; got != tc.wantCode {
				t.Errorf("code %d, want %d", got, tc.wantCode)
			}
			if got := err.Error(); got != tc.wantErr {
				t.Errorf("message\n got %s\nwant %s", got, tc.wantErr)
			}
		})
	}
}
