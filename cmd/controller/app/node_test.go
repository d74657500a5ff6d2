package app

import (
	"context"
	"strings"
	"testing"
)

// `kiln-controller node` stays for a release, saying what replaces it.
func TestNodeIsDeprecatedForKilnNodeAgent(t *testing.T) {
	node, _, err := NewCommand(context.Background()).Find([]string{"node"})
	if err != nil || node.Name() != "node" {
		t.Fatalf("kiln-controller node: %v, %v", node, err)
	}
	if !strings.Contains(node.Deprecated, "kiln-node-agent") {
		t.Errorf("Deprecated = %q, want it to name kiln-node-agent", node.Deprecated)
	}
}
