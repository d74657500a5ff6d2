# Kiln. `make run` starts a standalone server; `make test` is what CI runs.
SHELL := /usr/bin/env bash
OUTPUT := _output
BIN := $(OUTPUT)/bin
GO_SOURCES := $(shell find cmd pkg -name '*.go' 2>/dev/null) go.mod go.sum

.PHONY: all build generate verify test test-unit test-integration run clean

all: build

build: $(BIN)/kiln-apiserver

$(BIN)/kiln-apiserver: $(GO_SOURCES)
	@mkdir -p $(BIN)
	go build -o $@ ./cmd/apiserver

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
