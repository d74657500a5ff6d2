# Kiln. `make up` runs it on a local control plane, `make run` starts a
# standalone server; `make test` is what CI runs.
SHELL := /usr/bin/env bash
OUTPUT := _output
BIN := $(OUTPUT)/bin
GO_SOURCES := $(shell find cmd pkg -name '*.go' 2>/dev/null) go.mod go.sum
TEST_SOURCES := $(shell find test -name '*.go' 2>/dev/null) test/go.mod test/go.sum
# Everything is built and tested without cgo but the node agent and the
# package of NVML's bindings (CGO_PKGS): the servers, the control plane and
# the node's pieces are static anyway, and a dependency compiled both ways
# is compiled twice, which a cold Go cache pays for in minutes.
export CGO_ENABLED := 0
CGO_PKGS := ./pkg/deviceplugin/ ./cmd/kiln-node-agent/...
# go-nvml's cgo bindings declare NVML's deprecated calls too; gcc would warn
# about each of them on every build.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations
# Every build and test trims paths: the binaries need it to have the same
# digests from any checkout, and one setting for all lets a cold Go cache
# compile each dependency once, not once for the binaries and again for
# the tests.
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)

.PHONY: all build control-plane node node-packages node-images images images-next push generate verify verify-codegen verify-tree vet lint test test-binaries unit integration fuzz e2e e2e-cluster e2e-up e2e-install faults bench bench-api bench-scale up down clean-local run clean FORCE

all: build

build: $(BIN)/kiln-apiserver $(BIN)/kiln-controller $(BIN)/kiln-node-agent $(BIN)/kubectl-gpu

# Kiln's version: KILN_BASE_VERSION, then -g and the commit's first 12 hex
# digits, then -dirty when `git status` shows any change, untracked files
# included; e.g. v0.1.0-g1dd2a0e1d84e. The g, as git describe writes it,
# keeps a sha of digits a valid semver pre-release (and the whole a valid
# image tag). It goes into k8s.io/component-base/version of every binary,
# for their --version and kiln-apiserver's /version, and into the images'
# tags and labels. The build date is the commit's, not the clock's, so one
# commit builds the same binaries and the same image digests.
KILN_BASE_VERSION := v0.1.0
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
GIT_TREE_STATE := $(if $(shell git status --porcelain 2>/dev/null),dirty,clean)
GIT_VERSION := $(KILN_BASE_VERSION)-g$(shell git rev-parse --short=12 HEAD 2>/dev/null)$(if $(filter dirty,$(GIT_TREE_STATE)),-dirty)
KILN_VERSION ?= $(GIT_VERSION)
BUILD_DATE := $(shell TZ=UTC0 git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD 2>/dev/null)
VERSION_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KILN_VERSION) \
	-X k8s.io/component-base/version.gitCommit=$(GIT_COMMIT) \
	-X k8s.io/component-base/version.gitTreeState=$(GIT_TREE_STATE) \
	-X k8s.io/component-base/version.buildDate=$(BUILD_DATE)
GO_BUILD := go build -ldflags '$(VERSION_LDFLAGS)'

# Rewritten only when the version changes, so the binaries that depend on
# it are rebuilt then, and only then. One per BIN, so that images-next
# does not make the next `make build` relink.
VERSION_STAMP := $(BIN)/.version
$(VERSION_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(VERSION_LDFLAGS)' | cmp -s - $@ || echo '$(VERSION_LDFLAGS)' > $@

FORCE:

# The server and the controller need no C: static binaries, and no NVML
# linked into the controller (its deprecated `node` gets the no-cgo backend).
$(BIN)/kiln-apiserver: $(GO_SOURCES) $(VERSION_STAMP)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO_BUILD) -o $@ ./cmd/apiserver

$(BIN)/kiln-controller: $(GO_SOURCES) $(VERSION_STAMP)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO_BUILD) -o $@ ./cmd/controller

# The node agent reads the devices through NVML's bindings, which need cgo.
$(BIN)/kiln-node-agent: $(GO_SOURCES) $(VERSION_STAMP)
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO_BUILD) -o $@ ./cmd/kiln-node-agent

# The kubectl plugin: with $(BIN) on the PATH, `kubectl gpu ...` runs it.
$(BIN)/kubectl-gpu: $(GO_SOURCES) $(VERSION_STAMP)
	@mkdir -p $(BIN)
	$(GO_BUILD) -o $@ ./cmd/kubectl-gpu

# The real control plane the local cluster and end-to-end tests run: built
# from k8s.io/kubernetes and sigs.k8s.io/kwok by the test/ module, so the
# main module never depends on them. Each binary is rebuilt only when
# test/go.mod or test/go.sum changes.
CONTROL_PLANE := kube-apiserver kube-controller-manager kube-scheduler kubectl
# Without these the binaries report v0.0.0-master, which kubectl's version
# skew checks and discovery's serverVersion read.
KUBE_VERSION := v1.37.2
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37

control-plane: $(addprefix $(BIN)/,$(CONTROL_PLANE)) $(BIN)/etcd $(BIN)/kwok

# One go build for all four: it links one binary while it compiles the
# next one's packages, where four in a row would leave a core idle in each
# link.
$(addprefix $(BIN)/,$(CONTROL_PLANE)) &: test/go.mod test/go.sum
	@mkdir -p $(BIN)
	cd test && go build -ldflags "$(KUBE_LDFLAGS)" -o $(abspath $(BIN))/ $(addprefix k8s.io/kubernetes/cmd/,$(CONTROL_PLANE))

# The real node (issue N): the kubelet and kube-proxy from the same module
# and version as the control plane; containerd, its runc shim and the CNI
# plugins from their own modules at pinned versions, each installed into a
# directory named after its version so a new version is a new target; runc
# and iptables from Debian (hack/install-node-packages.sh).
NODE_KUBE := kubelet kube-proxy
CONTAINERD_VERSION := v2.4.2
CNI_PLUGINS_VERSION := v1.10.0
CNI_PLUGINS := main/bridge ipam/host-local main/loopback meta/portmap
CONTAINERD_DIR := $(OUTPUT)/tools/containerd-$(CONTAINERD_VERSION)
CNI_DIR := $(OUTPUT)/tools/cni-plugins-$(CNI_PLUGINS_VERSION)

node: $(addprefix $(BIN)/,$(NODE_KUBE) containerd containerd-shim-runc-v2 ctr) \
	$(addprefix $(BIN)/cni/,$(notdir $(CNI_PLUGINS))) node-packages node-images

$(addprefix $(BIN)/,$(NODE_KUBE)) &: test/go.mod test/go.sum
	@mkdir -p $(BIN)
	cd test && go build -ldflags "$(KUBE_LDFLAGS)" -o $(abspath $(BIN))/ $(addprefix k8s.io/kubernetes/cmd/,$(NODE_KUBE))

# Static, and without btrfs (its headers are not on these machines).
$(CONTAINERD_DIR)/%:
	@mkdir -p $(@D)
	GOBIN=$(abspath $(@D)) CGO_ENABLED=0 go install -tags no_btrfs github.com/containerd/containerd/v2/cmd/$*@$(CONTAINERD_VERSION)

$(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr: $(BIN)/%: $(CONTAINERD_DIR)/%
	@mkdir -p $(@D)
	cp $< $@

$(CNI_DIR)/%:
	@mkdir -p $(@D)
	GOBIN=$(abspath $(@D)) CGO_ENABLED=0 go install github.com/containernetworking/plugins/plugins/$(filter %/$*,$(CNI_PLUGINS))@$(CNI_PLUGINS_VERSION)

$(BIN)/cni/%: $(CNI_DIR)/%
	@mkdir -p $(@D)
	cp $< $@

# The images the real node runs, written without Docker (test/images):
# the pause image of sandboxes and Claim holders, a shell image, and the
# tests' SSH sidecar.
NODE_IMAGES := $(OUTPUT)/images/pause.tar $(OUTPUT)/images/workload.tar $(OUTPUT)/images/ssh.tar

node-images: $(NODE_IMAGES)

$(NODE_IMAGES) &: $(wildcard test/images/*.go test/cmd/kiln-images/*.go test/cmd/pause/*.go test/cmd/sshd/*.go) test/go.mod test/go.sum | node-packages
	@mkdir -p $(OUTPUT)/images
	cd test && CGO_ENABLED=0 go build -o $(abspath $(OUTPUT)/images/pause) ./cmd/pause
	cd test && CGO_ENABLED=0 go build -o $(abspath $(OUTPUT)/images/sshd) ./cmd/sshd
	cd test && go run ./cmd/kiln-images -out $(abspath $(OUTPUT)/images) \
		-pause $(abspath $(OUTPUT)/images/pause) -sshd $(abspath $(OUTPUT)/images/sshd) -busybox /bin/busybox

# Versioned copies stay, so a clean of _output/bin does not rebuild them.
.PRECIOUS: $(CONTAINERD_DIR)/% $(CNI_DIR)/%

node-packages:
	hack/install-node-packages.sh

# Static, as etcd's own releases are, so that its image needs no libc.
# Without the checkout's revision stamped in (-buildvcs=false): a binary
# kept from an earlier commit then equals a fresh clone's, and so do the
# image digests. kiln-holder's pause binary likewise.
$(BIN)/etcd: test/go.mod test/go.sum test/cmd/etcd/main.go
	@mkdir -p $(BIN)
	cd test && CGO_ENABLED=0 go build -buildvcs=false -o $(abspath $@) ./cmd/etcd

$(BIN)/kwok: test/go.mod test/go.sum
	@mkdir -p $(BIN)
	cd test && go build -o $(abspath $@) sigs.k8s.io/kwok/cmd/kwok

# Kiln's release images, written without Docker or a registry by
# test/cmd/kiln-release-images: one OCI image tarball per image under
# IMAGES_DIR, named kiln.local/<name>:$(KILN_VERSION) (etcd by its own
# version, from test/go.mod), and a table of their digests and sizes in
# images.txt. kiln-apiserver, kiln-controller, kiln-holder (the pause
# binary of Claims' holders) and etcd are static binaries run as user
# 65532, beside Debian's CA certificates and an /etc/passwd; kiln-node-agent
# runs as root, with the libraries of Debian's libc6 it links. They carry
# no creation time, so one commit gives the same digests.
IMAGES_DIR := $(OUTPUT)/images/kiln
KILN_SOURCE ?= https://kiln.dev/kiln
ETCD_VERSION := $(shell awk '$$1 == "go.etcd.io/etcd/server/v3" { print $$2 }' test/go.mod)

$(BIN)/pause: $(wildcard test/cmd/pause/*.go) test/go.mod test/go.sum
	@mkdir -p $(BIN)
	cd test && CGO_ENABLED=0 go build -buildvcs=false -o $(abspath $@) ./cmd/pause

images: $(addprefix $(BIN)/,kiln-apiserver kiln-controller kiln-node-agent pause etcd) $(VERSION_STAMP)
	cd test && go run ./cmd/kiln-release-images -out $(abspath $(IMAGES_DIR)) -bin $(abspath $(BIN)) \
		-version $(KILN_VERSION) -revision $(GIT_COMMIT) -source $(KILN_SOURCE) -etcd-version $(ETCD_VERSION)

# The build after this one, for test/install's rolling upgrade and
# rollback: the same sources stamped $(KILN_VERSION)-next, with binaries
# and images in directories of their own.
images-next:
	$(MAKE) images KILN_VERSION=$(KILN_VERSION)-next BIN=$(OUTPUT)/bin-next IMAGES_DIR=$(OUTPUT)/images/kiln-next

# Pushes the images `make images` writes to REGISTRY=host[:port]/path, as
# $(REGISTRY)/<name>:<tag>, with credentials from the Docker config
# (docker login, or ~/.docker/config.json). REGISTRY_INSECURE=1 pushes over
# plain HTTP.
ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY),)
$(error make push: set REGISTRY=host[:port]/path, the repository to push the images under)
endif
endif

push: images
	cd test && go run ./cmd/kiln-release-images -out $(abspath $(IMAGES_DIR)) -push $(REGISTRY) \
		$(if $(filter 1 true yes,$(REGISTRY_INSECURE)),-insecure)

# The launcher behind `make up` and the end-to-end tests.
$(BIN)/kiln-up: $(GO_SOURCES) $(TEST_SOURCES)
	@mkdir -p $(BIN)
	cd test && go build -o $(abspath $@) ./cmd/kiln-up

generate:
	hack/update-codegen.sh

# The linter, pinned, built from the Go module proxy into its own directory
# so that a new version is a new target.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(OUTPUT)/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	@mkdir -p $(@D)
	GOBIN=$(abspath $(@D)) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Its parts are targets of their own so that make test times each.
verify: lint verify-codegen verify-tree vet

verify-codegen:
	hack/verify-codegen.sh

verify-tree:
	hack/test-verify-filesize.sh
	hack/verify-filesize.sh
	hack/verify-gofmt.sh
	hack/verify-deps.sh
	hack/verify-layout.sh

vet:
	go vet -tags=integration ./...
	CGO_ENABLED=1 go vet $(CGO_PKGS)
	cd test && go vet ./...

lint: $(STATICCHECK)
	STATICCHECK=$(abspath $(STATICCHECK)) CGO_PKGS='$(CGO_PKGS)' hack/verify-lint.sh

# The stages of `make test`, each timed; the times are printed at the end.
# build comes before unit: cmd/apiserver's TestMakeRun runs `make run`,
# which from a cold Go cache ran out its 5 minutes compiling. The stages
# marked + only compile and analyse: they run in the background, at idle
# priority, beside the end-to-end stages, which leave the cores mostly
# idle (hack/run-test-stages.sh). Tests that wait on clocks stay in the
# foreground, where nothing starves them.
TEST_STAGES := verify-tree build unit integration test-binaries +verify-codegen +vet +lint +fuzz e2e-cluster e2e-up e2e-install faults

test:
	@MAKE='$(MAKE)' hack/run-test-stages.sh $(TEST_STAGES)

# Pure tests: no etcd, no server, no make run.
unit:
	go test -count=1 ./...
	CGO_ENABLED=1 go test -count=1 $(CGO_PKGS)

# Native Go fuzzing of what hostile input reaches first: request bodies
# through decoding, defaulting and validation; sizing and Budget charges
# over arbitrary quantities; field and label selectors with table printing.
# `make unit` runs their seed corpora; this runs each for FUZZTIME more. A
# failing input is written to the package's testdata/fuzz: commit it as a
# seed with the fix. FUZZTIME is a count of executions, not a duration: Go
# 1.26's coordinator can report its own -fuzztime deadline as a failure
# ("context deadline exceeded", no input; go.dev/issue/75804, fixed in
# 1.27), and a count has no deadline to race. -timeout=0 for the same
# reason: the test binary's 10-minute default becomes the fuzzing's
# deadline too, which `make test` running it at idle priority can reach.
FUZZTIME ?= 20000x
FUZZ_TARGETS := \
	./pkg/apis/gpu/install:FuzzDecodeValidate \
	./pkg/admission/instancesizing:FuzzSizeAndCharge \
	./pkg/registry/gpu/selection:FuzzSelectAndPrint

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "go test $${t%%:*} -fuzz '^$${t##*:}$$' -fuzztime $(FUZZTIME)"; \
		go test $${t%%:*} -run '^$$' -fuzz "^$${t##*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2000x -timeout=0; \
	done

# Tests tagged "integration" start a real server in-process on an embedded
# etcd (or run `make run`); these are their packages.
INTEGRATION_PKGS := $(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build integration' cmd pkg)))

integration:
	go test -count=1 -tags=integration $(addprefix ./,$(INTEGRATION_PKGS))

# End-to-end tests: test/e2e starts one local control plane for all its
# tests; test/cmd/kiln-up runs `make up` and `make down` themselves, and
# test/install installs Kiln from `make images` onto a cluster of its own,
# each after the rest, since every one of these clusters runs real-0 and a
# machine has one.
e2e: e2e-cluster e2e-up e2e-install

# What the end-to-end tests run, built before them.
test-binaries: control-plane build node images images-next $(BIN)/kiln-up

# -v: each test's time is in the log, which is how e2e's length is read.
# -parallel=32: test/e2e's parallel tests (40 with subtests) mostly wait
# on timers and on the cluster. Two at a time (the default, GOMAXPROCS),
# the package took 547 s; 474 s with 8 at a time, 441 s with 32.
e2e-cluster: test-binaries
	cd test && go test -v -count=1 -parallel=32 -timeout=40m $$(go list ./... | grep -v -e '/test/faults$$' -e '/test/cmd/kiln-up$$' -e '/test/install$$')
	cd test && go test -count=1 -run='^(TestObjectModel|TestClassify)$$' ./faults/

e2e-up: test-binaries
	cd test && go test -count=1 -timeout=20m ./cmd/kiln-up/

e2e-install: test-binaries
	cd test && go test -count=1 -timeout=30m ./install/; rc=$$?; \
		cat $(abspath $(OUTPUT))/install-report.txt 2>/dev/null; exit $$rc

# The fault suite (test/faults): a local cluster with a 3-member etcd and
# two Kiln replicas; etcd, one member, one replica, kube-apiserver, a node
# and kiln-controller each taken away three times under a logged load.
# It prints a table and fails when a promise does not hold. It runs after
# e2e, not beside it, so it never shares the two cores with another
# cluster; e2e runs its checker's own tests.
faults: control-plane build
	cd test && go test -count=1 -timeout=60m ./faults/; rc=$$?; \
		cat $(abspath $(OUTPUT))/faults/report.txt 2>/dev/null; exit $$rc

# A local control plane with Kiln in it, until Ctrl-C or `make down`.
# State is in LOCAL_DIR, and the next `make up` resumes it with its objects;
# FRESH=1 (or `make clean-local` first) discards it; FRESH=0 does not.
# KILN_REPLICAS=2 runs two kiln-apiservers behind the APIService's port,
# ETCD_MEMBERS=3 a three-member etcd; a resume needs the same ETCD_MEMBERS.
# The launcher's PID is in LOCAL_DIR.pid. REAL_NODE=1, the default for
# root, adds real-0, a real kubelet with containerd and runc (make node,
# make node-images); REAL_NODE=0 simulates every node.
LOCAL_DIR := $(OUTPUT)/local
FRESH ?=
REAL_NODE ?= $(if $(filter 0,$(shell id -u)),1,0)
REAL_NODE_ON := $(filter 1 true yes,$(REAL_NODE))

# Create-to-Ready of 200 and 1,000 Instances next to bare Pod+Service
# creates, 100 Claims to Bound with Instances on them next to Instances
# without, and a quiet tenant's create-to-Ready during another's 5,000
# creates and deletes, and a tenant's requests while another holds 500 log
# follows and 1,000 watches, each on a local control plane of its own
# (_output/bench, _output/bench-claims, _output/bench-fairness,
# _output/bench-slow-clients). Not part of `make test`: it takes about ten
# minutes. Figures: docs/benchmarks.md and docs/reliability.md.
bench: control-plane build
	cd test && go test -run='^$$' -bench='CreateToReady|Claims|Fairness|NamespaceDelete|SlowClients' -benchtime=1x -timeout=60m ./bench/

# A pool of 1,000 kwok nodes of 8 cards, 5,000 Instances in 100 namespaces
# with Budgets, 1,000 bare Pods and then 1,000 Claims created at once
# (the Pods time the binding floor under the Claims), then 1,000 new
# Instances next to 1,000 bare Pod+Service pairs, on a control plane of its own
# (_output/bench-scale); it prints a table, also kept in
# _output/bench-scale/table.md. BENCH_SCALE="nodes=50,instances=200,..."
# shrinks it for a quick look. Not part of `make test`. Figures:
# docs/benchmarks.md.
bench-scale: control-plane build
	cd test && go test -run='^$$' -bench='^BenchmarkScale$$' -benchtime=1x -timeout=90m ./bench/

# Kiln's API next to a CRD of the same schema, generated from pkg/apis by
# controller-gen, on a control plane of its own (_output/bench-api): the CRD,
# Kiln through the aggregator and Kiln direct, interleaved in one run. It
# prints the tables and rewrites their section of docs/benchmarks.md. Not
# part of `make test`: it takes about ten minutes.
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(OUTPUT)/tools/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen
BENCH_API_FLAGS ?=

$(CONTROLLER_GEN):
	@mkdir -p $(@D)
	GOBIN=$(abspath $(@D)) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

$(BIN)/bench-api: $(GO_SOURCES) $(TEST_SOURCES)
	@mkdir -p $(BIN)
	cd test && go build -o $(abspath $@) ./cmd/bench-api

bench-api: control-plane build $(BIN)/bench-api $(CONTROLLER_GEN)
	go test -tags=integration ./pkg/apiserver -run '^$$' -bench BenchmarkAdmissionChain -benchmem > $(OUTPUT)/bench-api-admission.txt
	$(BIN)/bench-api --dir=$(OUTPUT)/bench-api --bin-dir=$(BIN) --repo-root=. \
		--controller-gen=$(CONTROLLER_GEN) --admission-bench=$(OUTPUT)/bench-api-admission.txt \
		--docs=docs/benchmarks.md $(BENCH_API_FLAGS)

up: control-plane build $(BIN)/kiln-up $(if $(REAL_NODE_ON),node)
	$(if $(REAL_NODE_ON),,@echo "make up: no real node ($(if $(filter 0,$(shell id -u)),REAL_NODE=$(REAL_NODE),it needs root)); every node is simulated")
	$(BIN)/kiln-up --dir=$(LOCAL_DIR) --bin-dir=$(BIN) --repo-root=. $(if $(filter 1 true yes,$(FRESH)),--fresh) \
		$(if $(KILN_REPLICAS),--kiln-replicas=$(KILN_REPLICAS)) $(if $(ETCD_MEMBERS),--etcd-members=$(ETCD_MEMBERS)) \
		--real-node=$(if $(REAL_NODE_ON),true,false) --image-dir=$(OUTPUT)/images

# Signals the launcher `make up` started, by the PID it recorded; the
# launcher then stops the components it started, and nothing else.
down:
	@pid=$$(cat $(LOCAL_DIR).pid 2>/dev/null) || { echo "make down: no local cluster is running"; exit 0; }; \
	if [ "$$(ps -p $$pid -o comm= 2>/dev/null)" != "kiln-up" ]; then \
		echo "make down: PID $$pid is not kiln-up; removing the stale $(LOCAL_DIR).pid"; rm -f $(LOCAL_DIR).pid; exit 0; fi; \
	kill -TERM $$pid; \
	while kill -0 $$pid 2>/dev/null; do sleep 0.5; done; \
	echo "make down: stopped the local cluster (PID $$pid)"

# Discards the local cluster's state, so the next `make up` starts anew;
# refused while that cluster runs.
clean-local:
	@pid=$$(cat $(LOCAL_DIR).pid 2>/dev/null) && [ "$$(ps -p $$pid -o comm= 2>/dev/null)" = "kiln-up" ] && { \
		echo "make clean-local: the local cluster is running (PID $$pid); stop it with make down first"; exit 1; }; \
	rm -rf $(LOCAL_DIR) $(LOCAL_DIR).pid; echo "make clean-local: removed $(LOCAL_DIR)"

# RUN_FLAGS adds server flags, e.g. RUN_FLAGS=--secure-port=9443.
run: build
	$(BIN)/kiln-apiserver --standalone --data-dir=$(OUTPUT)/standalone $(RUN_FLAGS)

clean:
	rm -rf $(OUTPUT)
