# nodeshepherd: `make test` runs everything CI runs; `make demo` shows it working.
SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/nodeshepherd/nodeshepherd/pkg/version.Version=$(VERSION) -X github.com/nodeshepherd/nodeshepherd/pkg/version.Commit=$(COMMIT)
CONTROLPLANE_BINS := $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubemark
CONTROLPLANE_SRC := hack/controlplane/go.mod hack/controlplane/go.sum $(filter-out %_test.go,$(wildcard hack/controlplane/*/*.go)) hack/build-controlplane.sh
GO_TEST_FLAGS ?=
export NODESHEPHERD_BIN_DIR := $(BIN)
# The Go compiler and linker, the tests and the control plane collect garbage
# less often with a larger heap goal: a cold CGO_ENABLED=0 build of ./...
# took 119-123 s with GOGC=400 against 141-150 s with Go's default (100) on
# 2 cores (2026-11-29). Set GOGC to choose another. The bench-* targets run
# what they measure with Go's default (BENCH_GC below): a component's memory
# and CPU are reported as it runs in a cluster, and GOGC=400 let the
# 5,000-node fleet's kube-apiserver outgrow the 24 GiB machine.
export GOGC ?= 400
BENCH_GC := GOGC=100

.PHONY: all build controlplane helm chromium test test-unit test-integration test-loaded golden-preemption golden-scheduler golden-scenarios demo simulate bench-fakenodes bench-detection bench-steady bench-fleet bench-drain bench-scheduler chaos fuzz generate vet lint fmt clean

all: build controlplane

## build: the nodeshepherd binary in bin/ (static; the Dockerfile and the tests build it this way) and bin/kubectl-shepherd, a link to it (the kubectl plugin);
## GO_BUILD_TAGS=faulthook adds the failover tests' fault hooks (pkg/faulthook), which the release build leaves out
GO_BUILD_TAGS ?=
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 go build -trimpath -tags "$(GO_BUILD_TAGS)" -ldflags "$(LDFLAGS)" -o $(BIN)/nodeshepherd ./cmd/nodeshepherd
	ln -sf nodeshepherd $(BIN)/kubectl-shepherd

## controlplane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubemark (hollow nodes) in bin/ (cold: ~9 min)
controlplane: $(CONTROLPLANE_BINS)

# One build makes all four; make skips it while they are newer than their sources.
$(CONTROLPLANE_BINS) &: $(CONTROLPLANE_SRC)
	@hack/build-controlplane.sh

## helm: the Helm CLI (pinned in hack/helm/go.mod) in bin/, for charts/nodeshepherd and its test (cold: a few minutes)
helm: $(BIN)/helm

$(BIN)/helm: hack/helm/go.mod hack/helm/go.sum
	@mkdir -p $(BIN)
	cd hack/helm && v=$$(go list -m -f '{{.Version}}' helm.sh/helm/v4) && \
	  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$$v" -o $(BIN)/helm helm.sh/helm/v4/cmd/helm

## chromium: Debian's headless Chromium, which checks simulate's HTML report in the tests
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The in-process controllers, fake nodes and test code run under the race
# detector too; the control plane and simulate's binary are separate processes.
# SHARDS (6) processes run side by side, split by the last run's test durations,
# and chaos seeds 1,2,3 at the start of one of them (hack/test-integration.sh;
# GO_TEST_FLAGS may be -v; SHARDS, CHAOS_SEEDS, CHAOS_DURATION).
INTEGRATION_TEST = hack/test-integration.sh $(GO_TEST_FLAGS)

## test: lint, unit and integration tests and chaos seeds 1,2,3, race detector on (builds the control plane first)
# (vet, staticcheck and the control plane side by side with Helm and the
# race-enabled unit tests took 2.4 min longer on a cold cache than one after
# another: the steps run in order.)
test: vet lint controlplane helm chromium
	hack/test-unit.sh $(GO_TEST_FLAGS)
	$(INTEGRATION_TEST)

## test-unit: only the tests that need no control plane (packages outside test/, and the checks of deploy/ and the
## chart in pkg/manifests), race detector on; test binaries kept in bin/unit-tests, relinked when stale (hack/test-unit.sh)
test-unit: helm
	hack/test-unit.sh $(GO_TEST_FLAGS)

## test-loaded: make test LOADED_RUNS times (3) in a row while make test-unit runs in a loop beside it, as on a
## busy CI box; the loop stops at the end, and a failed round of it fails the target too (hack/test-loaded.sh: LOADED_CPUS=0,1 pins to 2 CPUs, LOADED_CMD, LOADED_LOAD)
test-loaded:
	hack/test-loaded.sh

## chaos: random fault schedules against 2-3 leader-elected replicas, checked by an independent
## watcher (docs/chaos.md): SEEDS=N random seeds, or SEED=1234 (or 1,2,3) to replay; DURATION of faults per seed
SEEDS ?= 1
SEED ?=
DURATION ?= 60s
chaos: controlplane
	go test -count=1 -v -timeout 0 -run '^TestChaos$$' ./test/chaos/ -args -seeds=$(SEEDS) -seed=$(SEED) -duration=$(DURATION)

## chaos-mutants: measure the chaos checker by mutation (docs/chaos.md#mutants): each mutant of test/chaos/mutants (one
## safety rule reverted) applied to a scratch copy of the tree, its seeds run until a violation, 10 min at most each;
## the table on stdout and in MUTANTS_OUT (bin/chaos-mutants.md). MUTANT=name,name for some; MUTANT=none runs the seeds unmutated
MUTANT ?=
MUTANTS_OUT ?=
.PHONY: chaos-mutants
chaos-mutants: controlplane
	go run ./hack/chaosmutants -mutant=$(MUTANT) $(if $(MUTANTS_OUT),-out=$(MUTANTS_OUT))

## generate: write what follows from the controllers' descriptors (pkg/generate): deploy/components/NAME,
## the Helm chart's templates/_controllers.tpl and crds/, deploy/kustomization.yaml's components and the chart's
## default controllers (what deploy/base/config.yaml runs), docs/architecture.md's row of the controllers;
## TestGeneratedFilesAreCurrent fails while one is stale
generate:
	go run ./hack/generate

## fuzz: every fuzz target for FUZZTIME each (default 1m; make test replays their corpora)
fuzz:
	hack/fuzz.sh

## test-integration: only the tests against the local control plane, race detector on
test-integration: controlplane helm chromium
	$(INTEGRATION_TEST)

## golden-preemption: re-record kube-scheduler's decisions on the preemption situations
## (test/integration/testdata/preemption-kube-scheduler.json, which make test compares nodeshepherd with)
golden-preemption: controlplane
	go test -count=1 -v -timeout 30m -run '^TestPreemptionSameAsKubeScheduler$$' ./test/integration/ -args -update-preemption-golden

## golden-scheduler: re-record kube-scheduler's decisions on the seeded differential workloads
## (test/integration/testdata/scheduler-differential-kube-scheduler.json and, for the batch mode, scheduler-differential-batch-kube-scheduler.json, which make test compares nodeshepherd with)
golden-scheduler: controlplane
	go test -count=1 -v -timeout 30m -run '^TestSchedulerDifferential(KubeScheduler|Batch)$$' ./test/integration/ -args -update-scheduler-golden

## golden-scenarios: re-record the upstream runs (--compare upstream) of the example scenarios that
## make test checks from a recording (test/integration/testdata/simulate-upstream.json)
golden-scenarios: controlplane
	go test -count=1 -v -timeout 30m -run '^TestExampleScenarios$$' ./test/integration/ -args -update-scenario-golden

## demo: a local control plane, fake nodes and a Deployment Running on them
demo: build controlplane
	$(BIN)/nodeshepherd demo

## simulate: seed 002's network blip, nodeshepherd next to upstream, 5x faster (SCENARIO=... TIME_SCALE=... TRIALS=... for others)
SCENARIO ?= examples/scenarios/network-blip.yaml
TIME_SCALE ?= 5
TRIALS ?= 1
simulate: build controlplane
	$(BIN)/nodeshepherd simulate $(SCENARIO) --compare upstream --time-scale $(TIME_SCALE) --trials $(TRIALS)

## bench-fakenodes: CPU and memory of 5,000 fake nodes (see docs/benchmarks.md)
bench-fakenodes: controlplane
	$(BENCH_GC) go test -run '^$$' -bench BenchmarkFakeNodes -benchtime 1x -timeout 30m ./test/bench/

## bench-detection: failure detection (p50/p95/max of 20 trials, BENCH_TRIALS=...) and API writes, kube-controller-manager next to nodeshepherd
bench-detection: controlplane
	$(BENCH_GC) go test -run '^$$' -bench BenchmarkDetection -benchtime 1x -timeout 30m ./test/bench/

## bench-drain: 100 sick nodes x 20 pods drained, 10 at a time, through PDBs (see docs/benchmarks.md)
bench-drain: controlplane
	$(BENCH_GC) go test -run '^$$' -bench BenchmarkDrain -benchtime 1x -timeout 45m ./test/bench/

## bench-scheduler: kube-scheduler vs nodeshepherd, 1,000 nodes: 10,000 plain pods (as fast as 32 clients go, then paced at 100/s), anti-affine and spread pods, 1,000 preemptors (5 trials, kube-scheduler's client limits checked on its /configz); one cycle at 5,000 nodes
bench-scheduler: controlplane
	$(BENCH_GC) go test -run '^$$' -bench 'Benchmark(ScheduleOne|ScheduleOneAntiAffinity|ScheduleOneSpread|Preemption|FilterFailing)5000Nodes' ./pkg/controller/scheduler/
	$(BENCH_GC) go test -run '^$$' -bench BenchmarkScheduler -benchtime 1x -timeout 180m ./test/bench/

## bench-fleet: 5,000 nodes and 150,000 pods under kube-controller-manager, then under every nodeshepherd controller
## (remediation policy on): steady CPU and RSS, a rack of 50 cut at once (detection p50/p95/p99, the policy's steps,
## API requests and client throttling); BENCH_NODES, BENCH_PODS_PER_NODE, BENCH_RACK, BENCH_WINDOW, BENCH_PROFILE_DIR,
## BENCH_CREATE_RATE (100 pods/s), BENCH_APISERVER_GOMEMLIMIT (10GiB), BENCH_APISERVER_ARGS
bench-fleet: controlplane
	$(BENCH_GC) go test -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 180m ./test/bench/

## bench-steady: steady-state CPU at 5,000 nodes, kube-controller-manager next to nodeshepherd
bench-steady: controlplane
	$(BENCH_GC) go test -run '^$$' -bench BenchmarkSteadyStateCPU -benchtime 1x -timeout 30m ./test/bench/

# go vet and staticcheck compile the packages they check (and all their
# dependencies) the way make build and the control plane do: CGO_ENABLED=0
# and -trimpath, so that a cold build cache compiles client-go and the rest
# once for all four rather than once with each setting. (The race-enabled
# tests are a second set; the race detector needs cgo.)
NONRACE_ENV := CGO_ENABLED=0 GOFLAGS=-trimpath

vet:
	$(NONRACE_ENV) go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# staticcheck, pinned (it must know the Go version in go.mod), installed from
# the Go module proxy into bin/ once per version; the stamp names the version.
STATICCHECK_VERSION := v0.8.2
STATICCHECK_STAMP := $(BIN)/.staticcheck-$(STATICCHECK_VERSION)

## lint: staticcheck (staticcheck.conf) on every package
lint:
	@[ -x $(BIN)/staticcheck ] && [ -f $(STATICCHECK_STAMP) ] || { mkdir -p $(BIN) && rm -f $(BIN)/.staticcheck-* && \
		GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) && touch $(STATICCHECK_STAMP); }
	$(NONRACE_ENV) $(BIN)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
