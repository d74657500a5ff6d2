#!/usr/bin/env bash
# Regenerates deepcopy, conversion, defaults, OpenAPI, clientset,
# applyconfigurations, listers and informers from pkg/apis.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
# A cold module cache has no source for the generators yet.
go mod download k8s.io/code-generator k8s.io/kube-openapi
CODEGEN_PKG=$(go list -m -f "{{.Dir}}" k8s.io/code-generator)
# Generators are installed under _output so they never touch the user's GOPATH/bin.
export GOBIN="${ROOT}/_output/codegen-bin"
mkdir -p "${GOBIN}"

source "${CODEGEN_PKG}/kube_codegen.sh"

THIS_PKG="kiln.dev/kiln"
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers --boilerplate "${BOILERPLATE}" "${ROOT}/pkg/apis"

kube::codegen::gen_openapi \
    --output-dir "${ROOT}/pkg/generated/openapi" \
    --output-pkg "${THIS_PKG}/pkg/generated/openapi" \
    --extra-pkgs "k8s.io/api/core/v1" \
    --report-filename "${ROOT}/hack/api-rule-violations.list" \
    --update-report \
    --output-model-name-file "zz_generated.model_name.go" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"

core_externals=""
for t in Toleration LocalObjectReference EnvVar PersistentVolumeClaimVolumeSource ConfigMapVolumeSource SecretVolumeSource HostPathVolumeSource; do
    core_externals+="${core_externals:+,}k8s.io/api/core/v1.${t}:k8s.io/client-go/applyconfigurations/core/v1"
done

kube::codegen::gen_client \
    --with-watch \
    --plural-exceptions "NodeDevices:NodeDevices" \
    --with-applyconfig \
    --applyconfig-externals "${core_externals}" \
    --applyconfig-openapi-schema <(go run "${THIS_PKG}/pkg/generated/openapi/cmd/models-schema") \
    --output-dir "${ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"
