// Command models-schema prints the OpenAPI v2 definitions of the generated
// models, the input applyconfiguration-gen needs to know each type's merge
// strategy.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"kiln.dev/kiln/pkg/generated/openapi"
)

func main() {
	if err := output(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func output() error {
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(map[string]spec.Schema, len(defs))
	for name, def := range defs {
		// Prefer an embedded v2 schema, so the output is always OpenAPI v2.
		if s, ok := def.Schema.Extensions[common.ExtensionV2Schema].(spec.Schema); ok {
			schemas[name] = s
			continue
		}
		schemas[name] = def.Schema
	}
	data, err := json.Marshal(&spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Definitions: schemas,
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "Kiln", Version: "unversioned"}},
		Swagger:     "2.0",
	}})
	if err != nil {
		return fmt.Errorf("serializing definitions: %w", err)
	}
	_, err = os.Stdout.Write(data)
	return err
}
