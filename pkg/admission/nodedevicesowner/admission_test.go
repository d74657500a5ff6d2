package nodedevicesowner

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestValidate(t *testing.T) {
	agentOn := func(node string) user.Info {
		return &user.DefaultInfo{Name: "system:serviceaccount:kiln-system:kiln-node-agent", Extra: map[string][]string{NodeNameExtra: {node}}}
	}
	for _, tc := range []struct {
		name, object, resource, sub string
		user                        user.Info
		op                          admission.Operation
		wantErr                     string
	}{
		{name: "its own node", object: "gpu-1", resource: "nodedevices", user: agentOn("gpu-1"), op: admission.Create},
		{name: "its own node's status", object: "gpu-1", resource: "nodedevices", sub: "status", user: agentOn("gpu-1"), op: admission.Update},
		{name: "another node", object: "gpu-2", resource: "nodedevices", sub: "status", user: agentOn("gpu-1"), op: admission.Update,
			wantErr: `nodedevices.gpu.kiln.dev "gpu-2" is forbidden: the node agent of node [gpu-1] may write only the NodeDevices named after its node, not "gpu-2"`},
		{name: "deleting another node's", object: "gpu-2", resource: "nodedevices", user: agentOn("gpu-1"), op: admission.Delete,
			wantErr: `nodedevices.gpu.kiln.dev "gpu-2" is forbidden: the node agent of node [gpu-1] may write only the NodeDevices named after its node, not "gpu-2"`},
		{name: "a token naming two nodes", object: "gpu-1", resource: "nodedevices", op: admission.Update,
			user:    &user.DefaultInfo{Name: "x", Extra: map[string][]string{NodeNameExtra: {"gpu-1", "gpu-2"}}},
			wantErr: `nodedevices.gpu.kiln.dev "gpu-1" is forbidden: the node agent of node [gpu-1 gpu-2] may write only the NodeDevices named after its node, not "gpu-1"`},
		{name: "a cluster admin, no node", object: "gpu-2", resource: "nodedevices", user: &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, op: admission.Update},
		{name: "other resources are not its business", object: "train", resource: "instances", user: agentOn("gpu-1"), op: admission.Create},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := admission.NewAttributesRecord(&gpu.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: tc.object}}, nil, gpu.Kind("NodeDevices").WithVersion("v1alpha1"),
				"", tc.object, gpu.Resource(tc.resource).WithVersion("v1alpha1"), tc.sub, tc.op, nil, false, tc.user)
			err := New().Validate(context.Background(), a, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("error %v\nwant %s", err, tc.wantErr)
			}
		})
	}
}
