package app

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/component-base/version"
)

// --version prints the version make stamps, before NVML is opened.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand(context.Background())
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "kiln-node-agent version " + version.Get().GitVersion + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
