package kubectlgpu

import (
	"fmt"
	"strings"
	"testing"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func withSSH(nodePort int32) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) {
		i.Spec.SSH = &v1alpha1.SSHSpec{AuthorizedKeysSecret: "keys"}
		i.Spec.Ports = []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888}, {Name: "ssh", Port: 22}}
		i.Status.Ports = []v1alpha1.InstancePortStatus{{Name: "jupyter", Port: 8888, NodePort: 30888}}
		if nodePort != 0 {
			i.Status.Ports = append(i.Status.Ports, v1alpha1.InstancePortStatus{Name: "ssh", Port: 22, NodePort: nodePort})
		}
	}
}

func TestSSH(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inst     *v1alpha1.Instance
		args     string
		want     string
		wantExec string
		wantErr  string
	}{
		{name: "print", inst: instance("nb", withSSH(31022)), want: "ssh -p 31022 192.0.2.10\n"},
		{name: "login, key and quoting", inst: instance("nb", withSSH(31022)), args: "-l jovyan -i /keys/my\\ key",
			want: "ssh -p 31022 -l jovyan -i '/keys/my key' 192.0.2.10\n"},
		{name: "exec with ssh's own arguments", inst: instance("nb", withSSH(31022)), args: "--exec -- -L 8888:localhost:8888",
			wantExec: "[-p 31022 192.0.2.10 -L 8888:localhost:8888]"},
		{name: "no spec.ssh", inst: instance("nb"),
			wantErr: `instance "nb" in namespace "tenant-a" has no SSH: set spec.ssh.authorizedKeysSecret`},
		{name: "no port 22", inst: instance("nb", withSSH(0), func(i *v1alpha1.Instance) { i.Spec.Ports = i.Spec.Ports[:1] }),
			wantErr: "publishes no port 22, where its SSH sidecar listens: add {name: ssh, port: 22} to spec.ports"},
		{name: "no node port yet", inst: instance("nb", withSSH(0)),
			wantErr: "has no node port for port 22 yet (Ready: running on gpu-0); try again shortly"},
		{name: "stopped", inst: instance("nb", withSSH(31022), stopped),
			wantErr: `instance "nb" in namespace "tenant-a" is stopped; start it with kubectl gpu start nb -n tenant-a --wait`},
		{name: "not placed", inst: instance("nb", withSSH(31022), pending("waiting for the scheduler")),
			wantErr: "runs on no node yet (Pending: waiting for the scheduler); kubectl gpu why nb -n tenant-a says why"},
		{name: "two names", inst: instance("nb", withSSH(31022)), args: "other",
			wantErr: "one Instance at a time; pass ssh's own arguments after --"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objs(tc.inst))
			args := append([]string{"ssh", "nb", "-n", ns}, splitArgs(tc.args)...)
			out, _, err := f.run(t, args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output %q, want %q", out, tc.want)
			}
			if got := fmt.Sprint(f.ssh); tc.wantExec != "" && got != tc.wantExec {
				t.Errorf("ran ssh %s, want %s", got, tc.wantExec)
			}
		})
	}
}

// splitArgs splits on spaces, except escaped ones.
func splitArgs(s string) []string {
	var out []string
	for _, f := range strings.Fields(strings.ReplaceAll(s, `\ `, "\x00")) {
		out = append(out, strings.ReplaceAll(f, "\x00", " "))
	}
	return out
}
