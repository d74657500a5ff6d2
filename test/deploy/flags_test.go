package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestManifestFlagsParse: every flag the Deployments pass is one their
// binary has. The API server's Deployment once passed in-flight limits the
// server did not take, and no dry run could see it: a Pod of it would
// only have crashed at start.
func TestManifestFlagsParse(t *testing.T) {
	for _, tc := range []struct{ file, binary string }{
		{"apiserver.yaml", "kiln-apiserver"},
		{"controller.yaml", "kiln-controller"},
	} {
		t.Run(tc.binary, func(t *testing.T) {
			d := decode[appsv1.Deployment](t, tc.file, "Deployment")
			args := d.Spec.Template.Spec.Containers[0].Args
			// --help once every flag is parsed: the binary prints its
			// usage and runs nothing.
			out, err := exec.Command(filepath.Join(root, "_output", "bin", tc.binary), append(args, "--help")...).CombinedOutput()
			if err != nil || strings.Contains(string(out), "unknown flag") {
				t.Errorf("%s %s --help: %v\n%s", tc.binary, strings.Join(args, " "), err, firstLines(string(out), 5))
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
