#!/usr/bin/env bash
# Regenerates protobuf, deepcopy, conversion, defaults, OpenAPI, clientset,
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

# protoc runs go-to-protobuf's protoc-gen-gogo. CI is a clean Debian
# machine where the script runs as root.
ensure_protoc() {
    command -v protoc >/dev/null && return
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "protoc not found: installing protobuf-compiler with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        # A fresh machine has no package lists yet.
        apt-get install -y -q protobuf-compiler >&2 ||
            { apt-get update -q >&2 && apt-get install -y -q protobuf-compiler >&2; } || true
    fi
    if ! command -v protoc >/dev/null; then
        echo "protoc is needed to generate the protobuf encoding of pkg/apis and could not be installed;" >&2
        echo "install it (Debian: apt-get install protobuf-compiler) and run 'make generate' again" >&2
        exit 1
    fi
}

# The apimachinery packages whose .proto Kiln's .proto imports, directly or
# through k8s.io/api/core/v1. A leading '-' marks a package whose .proto is only
# imported, never written: those ship in their modules.
APIMACHINERY_PROTO_PKGS=(
    -k8s.io/apimachinery/pkg/util/intstr
    -k8s.io/apimachinery/pkg/api/resource
    -k8s.io/apimachinery/pkg/runtime/schema
    -k8s.io/apimachinery/pkg/runtime
    -k8s.io/apimachinery/pkg/apis/meta/v1
)

# gen_protobuf writes generated.proto and generated.pb.go in every package
# of pkg/apis tagged +k8s:protobuf-gen=package, and protobuf tags on its
# types, as Kubernetes does for k8s.io/api. It runs first: the tags it adds
# to types.go are read by the generators after it.
gen_protobuf() (
    local dirs=() pkgs=() dir
    while IFS= read -r dir; do
        dirs+=("${dir}")
        pkgs+=("${THIS_PKG}/${dir#"${ROOT}/"}")
    done < <(grep -rl --include=doc.go '^// +k8s:protobuf-gen=package' "${ROOT}/pkg/apis" | xargs -n1 dirname | sort -u)
    [ "${#dirs[@]}" -gt 0 ] || return 0
    ensure_protoc

    # The generators and their tools at the versions code-generator's own
    # go.mod pins; the generated code does not depend on gogo.
    local tools_version gogo
    tools_version=$(cd "${CODEGEN_PKG}" && go list -m -f '{{.Version}}' golang.org/x/tools)
    (cd "${CODEGEN_PKG}" && go install ./cmd/go-to-protobuf ./cmd/go-to-protobuf/protoc-gen-gogo)
    go install "golang.org/x/tools/cmd/goimports@${tools_version}"
    gogo=$(cd "${CODEGEN_PKG}" && go list -m -f '{{.Dir}}' github.com/gogo/protobuf)

    # protoc finds every .proto by its Go import path: a GOPATH-like tree of
    # this module, the k8s.io modules it imports, and gogo's extensions
    # (with google/protobuf/descriptor.proto).
    local src
    src=$(mktemp -d)
    trap 'rm -rf "${src}"' EXIT
    mkdir -p "${src}/kiln.dev" "${src}/k8s.io" "${src}/github.com/gogo"
    ln -s "${ROOT}" "${src}/${THIS_PKG}"
    ln -s "$(go list -m -f '{{.Dir}}' k8s.io/api)" "${src}/k8s.io/api"
    ln -s "$(go list -m -f '{{.Dir}}' k8s.io/apimachinery)" "${src}/k8s.io/apimachinery"
    ln -s "${gogo}" "${src}/github.com/gogo/protobuf"

    for dir in "${dirs[@]}"; do
        rm -f "${dir}/generated.proto" "${dir}/generated.pb.go"
    done
    PATH="${GOBIN}:${PATH}" "${GOBIN}/go-to-protobuf" \
        --go-header-file "${BOILERPLATE}" \
        --output-dir "${src}" \
        --proto-import "${gogo}/protobuf" \
        --drop-gogo-go \
        --apimachinery-packages "$(IFS=,; echo "${APIMACHINERY_PROTO_PKGS[*]}")" \
        --packages "-k8s.io/api/core/v1,$(IFS=,; echo "${pkgs[*]}")"
)

gen_protobuf

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
