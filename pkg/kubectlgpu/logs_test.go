package kubectlgpu

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func TestLogs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inst     *v1alpha1.Instance
		args     string
		logErr   error
		want     string
		wantOpts v1alpha1.InstanceLogOptions
		wantErr  string
	}{
		{name: "all of it", inst: instance("nb"), want: "container started\nepoch 1\n"},
		{name: "follow, tail, container, since", inst: instance("nb"), args: "-f --tail=5 -c ssh --since=90s --timestamps",
			want:     "container started\nepoch 1\n",
			wantOpts: v1alpha1.InstanceLogOptions{Follow: true, TailLines: ptr.To[int64](5), Container: "ssh", SinceSeconds: ptr.To[int64](90), Timestamps: true}},
		{name: "missing", inst: instance("other"),
			wantErr: `instance "nb" not found in namespace "tenant-a"; list them with kubectl get instances -n tenant-a`},
		{name: "stopped", inst: instance("nb", stopped), logErr: apierrors.NewBadRequest("instance tenant-a/nb is stopped"),
			wantErr: `instance "nb" in namespace "tenant-a" is stopped and has no log to read; start it with kubectl gpu start nb -n tenant-a --wait`},
		{name: "not running yet", inst: instance("nb", pending("waiting for the scheduler")), logErr: apierrors.NewBadRequest("instance tenant-a/nb has no pod yet"),
			wantErr: "instance tenant-a/nb has no pod yet\ninstance \"nb\" is Pending: waiting for the scheduler; kubectl gpu why nb -n tenant-a says why"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objs(tc.inst))
			f.logs[ns+"/nb"] = "container started\nepoch 1\n"
			if tc.inst.Name != "nb" {
				delete(f.logs, ns+"/nb")
			}
			f.logErr = tc.logErr
			out, _, err := f.run(t, append([]string{"logs", "nb", "-n", ns}, strings.Fields(tc.args)...)...)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
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
			if diff := cmp.Diff(tc.wantOpts, *f.logOpts); diff != "" {
				t.Errorf("log options (-want +got):\n%s", diff)
			}
		})
	}
}
