//go:build tools

// Package tools pins the code generators so `go mod` keeps them.
package tools

import (
	_ "k8s.io/code-generator"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
)
