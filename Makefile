# Kiln. `make run` starts a standalone server; `make test` is what CI runs.
SHELL := /usr/bin/env bash
OUTPUT := _output
BIN := $(OUTPUT)/bin
GO_SOURCES := $(shell find cmd pkg -name '*.go' 2>/dev/null) go.mod go.sum

.PHONY: all build control-plane generate verify test run clean

all: build

build: $(BIN)/kiln-apiserver

$(BIN)/kiln-apiserver: $(GO_SOURCES)
	@mkdir -p $(BIN)
	go build -o $@ ./cmd/apiserver

# The real control plane the local cluster and end-to-end tests run: built
# from k8s.io/kubernetes by the test/ module, so the main module never
# depends on it. Each binary is rebuilt only when test/go.sum changes.
CONTROL_PLANE := kube-apiserver kube-controller-manager kube-scheduler kubectl
KWOK_VERSION := v0.8.0
# Without these the binaries report v0.0.0-master, which kubectl's version
# skew checks and discovery's serverVersion read.
KUBE_VERSION := v1.37.2
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37

control-plane: $(addprefix $(BIN)/,$(CONTROL_PLANE)) $(BIN)/etcd $(BIN)/kwok

$(addprefix $(BIN)/,$(CONTROL_PLANE)): $(BIN)/%: test/go.mod test/go.sum
	@mkdir -p $(BIN)
	cd test && go build -ldflags "$(KUBE_LDFLAGS)" -o $(abspath $@) k8s.io/kubernetes/cmd/$*

$(BIN)/etcd: test/go.mod test/go.sum test/cmd/etcd/main.go
	@mkdir -p $(BIN)
	cd test && go build -o $(abspath $@) ./cmd/etcd

$(BIN)/kwok:
	@mkdir -p $(BIN)
	GOBIN=$(abspath $(BIN)) go install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

generate:
	hack/update-codegen.sh

verify:
	hack/verify-gofmt.sh
	hack/verify-codegen.sh
	hack/verify-deps.sh
	go vet ./...

test: verify
	go test -count=1 ./...

# RUN_FLAGS adds server flags, e.g. RUN_FLAGS=--secure-port=9443.
run: build
	$(BIN)/kiln-apiserver --standalone --data-dir=$(OUTPUT)/standalone $(RUN_FLAGS)

clean:
	rm -rf $(OUTPUT)
