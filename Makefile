# toolgate Makefile. Tools are pinned here and installed into bin/ on first use.

IMG ?= toolgate/controller:dev
RUNNER_IMG ?= toolgate/runner:dev

LOCALBIN ?= $(shell pwd)/bin
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
GREMLINS_VERSION ?= v0.6.0
K8S_VERSION ?= 1.37.2
ETCD_VERSION ?= 3.7.3

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
GREMLINS ?= $(LOCALBIN)/gremlins-$(GREMLINS_VERSION)
ENVTEST_ASSETS ?= $(LOCALBIN)/k8s/$(K8S_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)

GOTEST_FLAGS ?=
BENCH_INTENTS ?= 1000
BENCH_TASKS ?= 100
BENCH_PERTASK ?= 100
BENCH_LEGS ?= 3
FUZZTIME ?= 10m
# make test-gates: how many gate removals are tested at once (each in a copy of the
# repository of its own).
GATES_JOBS ?= 1
# make mutation-score: the packages gremlins mutates, and the bound of each run.
MUTATION_PACKAGES ?= ./internal/mask ./internal/judge ./internal/netwall
MUTATION_TIMEOUT ?= 30m

# Images built without a container engine (hack/ocibuild) and the kind cluster.
WORKSPACE_IMG ?= toolgate/workspace:dev
# The git server of the e2e suite and the demo (hack/gitserver): git's own
# git-http-backend and git, from Debian's git package, with the libraries they load;
# it also carries their notification sink (hack/notifysink).
GITSERVER_IMG ?= toolgate/gitserver:dev
GIT_BINARIES ?= /usr/bin/git /usr/lib/git-core/git-http-backend
# The workspace image carries git too (agents run it, and the e2e suite checks what
# configuration it reads), with the libraries it loads.
WORKSPACE_GIT ?= /usr/bin/git
# The archive's PostgreSQL (config/archive), from Debian's postgresql package: the
# server, initdb, psql and pg_isready with the libraries they load, the share dir
# (catalog, time zone sets, text search data), the time zone database, and the
# modules initdb and client encodings load. llvmjit.so is left out (it pulls in LLVM,
# over 100 MB); hack/pgserver runs postgres with jit=off. busybox is there because
# initdb runs its bootstrap backend through /bin/sh (popen). The major version is
# pinned: a data directory initialised by one opens in no other.
POSTGRES_IMG ?= toolgate/postgres:dev
PG_VERSION ?= 15
PG_DIR ?= /usr/lib/postgresql/$(PG_VERSION)
PG_SHARE ?= /usr/share/postgresql/$(PG_VERSION)
PG_BINARIES ?= $(PG_DIR)/bin/postgres $(PG_DIR)/bin/initdb $(PG_DIR)/bin/psql $(PG_DIR)/bin/pg_isready
PG_MODULES ?= $(PG_DIR)/lib/plpgsql.so $(PG_DIR)/lib/dict_snowball.so $(wildcard $(PG_DIR)/lib/*_and_*.so)
IMAGES_DIR ?= $(LOCALBIN)/images
BUSYBOX ?= $(shell command -v busybox 2>/dev/null || echo /bin/busybox)
# The bash tool runs commands with bash only (the shell the policy classifies them
# for), so the workspace image carries a static bash beside busybox.
BASH_STATIC ?= /bin/bash-static
KIND_STATE ?= /var/lib/toolgate-kind
export KIND_STATE
KIND_KUBECONFIG ?= $(KIND_STATE)/kubeconfig
# The kind cluster's registry (hack/kind.sh up starts it): images-push writes the
# images there, and local-deploy deploys them from it by digest.
KIND_REGISTRY ?= $(shell hack/kind.sh registry)
# go test's -timeout stays above ginkgo's, so that a suite out of time still prints
# ginkgo's summary of its failed specs instead of go test's goroutine dump.
E2E_TIMEOUT ?= 45m
E2E_GINKGO_TIMEOUT ?= 40m

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and the controller's ClusterRole from markers.
	$(CONTROLLER_GEN) rbac:roleName=toolgate-manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases
	@# The chart carries the same CRDs and ClusterRole (named as config/default's
	@# namePrefix names it); hack/installer's tests check the rest of it.
	cp config/crd/bases/*.yaml dist/chart/crds/
	sed 's/^  name: toolgate-manager-role$$/  name: toolgate-toolgate-manager-role/' config/rbac/role.yaml > dist/chart/templates/rbac/role.yaml

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify-generated
verify-generated: manifests generate ## Fail when generated files are not up to date.
	@git diff --exit-code -- api config dist/chart || { echo "generated files are stale: run 'make manifests generate' and commit"; exit 1; }

.PHONY: test
test: envtest-assets oracle-deps postgres-deps browser-deps ## Run unit and integration (envtest) tests against a real kube-apiserver and etcd; the console's tests in Chromium, never skipped.
	TOOLGATE_REQUIRE_BROWSER=1 KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(GOTEST_FLAGS) ./...

.PHONY: console-screenshots
console-screenshots: envtest-assets browser-deps ## Regenerate docs/images/console-*.png from the console's browser tests (docs/approvals.md, "Console").
	mkdir -p docs/images
	TOOLGATE_REQUIRE_BROWSER=1 TOOLGATE_SCREENSHOTS=$(CURDIR)/docs/images KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test ./internal/cli/ -run '^TestConsole' -count=1

.PHONY: test-reliability
test-reliability: envtest-assets ## Run the reliability tests (kill points, split brain, a flaky API server, fuzzed intents) in their long form: 1000 fuzzed intents.
	TOOLGATE_RELIABILITY_LONG=1 KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(GOTEST_FLAGS) ./internal/reliability/ -count=1 -v -timeout 60m

.PHONY: fuzz-differential
fuzz-differential: oracle-deps ## Explore the differential test of the classifier against bash in the oracle's sandbox (docs/policy.md, "The oracle") for FUZZTIME (default 10m); a failing input is kept in internal/policy/testdata/fuzz/.
	go test ./internal/policy/ -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime $(FUZZTIME)
.PHONY: test-gates
test-gates: envtest-assets ## Remove each gate listed in hack/gates/gates.yaml in turn, in a throwaway copy of the repository, and fail unless the tests the list names catch it (docs/reliability.md). GATES_JOBS sets how many at once.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go run ./hack/gates -j $(GATES_JOBS)

.PHONY: mutation-score
mutation-score: gremlins ## Report gremlins' mutation score of MUTATION_PACKAGES (every operator mutant; a report, not a gate: docs/reliability.md).
	@for p in $(MUTATION_PACKAGES); do echo "== $$p"; \
	  timeout $(MUTATION_TIMEOUT) $(GREMLINS) unleash $$p --workers 1 --test-cpu 1 --timeout-coefficient 3 -S lt || exit 1; done

.PHONY: bench
bench: ## Run the benchmarks reported in docs/benchmarks.md.
	go test -run '^$$' -bench . -benchmem ./internal/policy/...
	go test -run '^$$' -bench . -benchmem ./internal/mask/

.PHONY: bench-pipeline
bench-pipeline: envtest-assets ## Run the pipeline benchmark (envtest, the whole controller in-process, then cmd/manager as its own process; docs/benchmarks.md). BENCH_INTENTS sets the burst size, BENCH_TASKS, BENCH_PERTASK and BENCH_LEGS the last phase's tasks, intents per task and leg, and legs.
	TOOLGATE_BENCH_INTENTS="$(BENCH_INTENTS)" TOOLGATE_BENCH_TASKS="$(BENCH_TASKS)" TOOLGATE_BENCH_PERTASK="$(BENCH_PERTASK)" TOOLGATE_BENCH_LEGS="$(BENCH_LEGS)" KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test -tags pipelinebench ./internal/pipelinebench/ -run '^TestPipeline$$' -count=1 -v -timeout 90m

.PHONY: test-e2e
test-e2e: ## Run the e2e suite against the cluster KUBECONFIG names; without KUBECONFIG, on the kind cluster (brought up, images pushed to its registry, toolgate deployed from there).
	@rm -rf test/e2e/logs
	@# On the kind cluster the suite runs the images local-deploy pushed, by digest, and
	@# checks that the cluster pulled them from the registry (E2E_REGISTRY).
	@# There, toolgate is installed twice, as a user would: first with helm from
	@# dist/chart, where the README's walk-through runs, then (once the release is
	@# uninstalled) with kubectl apply -f dist/install.yaml, where the whole suite runs.
	@# Then it is upgraded with calls in flight: UPGRADE_FROM's toolgate is installed,
	@# the upgrade-before spec leaves calls in flight, this tree's is applied over it,
	@# and the upgrade-after spec checks them, before the rest of the suite runs.
	@if [ -z "$$KUBECONFIG" ]; then $(MAKE) --no-print-directory test-e2e-helm test-e2e-upgrade || exit 1; \
	  export E2E_REGISTRY=$(KIND_REGISTRY) E2E_WORKSPACE_IMAGE="$$(cat $(IMAGES_DIR)/workspace.ref)" E2E_GITSERVER_IMAGE="$$(cat $(IMAGES_DIR)/gitserver.ref)"; fi; \
	KUBECONFIG="$${KUBECONFIG:-$(KIND_KUBECONFIG)}" PATH="$(ENVTEST_ASSETS):$$PATH" \
	  go test -tags e2e ./test/e2e/ -count=1 -timeout $(E2E_TIMEOUT) -v -ginkgo.v -ginkgo.timeout $(E2E_GINKGO_TIMEOUT) -ginkgo.label-filter='!bench && !upgrade-before && !upgrade-after' || { \
	  if [ -z "$$KUBECONFIG" ]; then hack/kind.sh logs test/e2e/logs; fi; \
	  echo "e2e failed: logs are in test/e2e/logs/"; exit 1; }

.PHONY: test-e2e-helm
test-e2e-helm: kind-up images images-push helm ## On the kind cluster: install toolgate from dist/chart with helm (its images from the cluster's registry), run the README's walk-through on it, and uninstall the release (the CRDs stay, as helm leaves them).
	@rm -rf test/e2e/logs
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" hack/archive-secret.sh
	KUBECONFIG=$(KIND_KUBECONFIG) $(HELM) upgrade --install toolgate dist/chart -n toolgate-system --wait --timeout 5m \
	  --set images.controller="$$(cat $(IMAGES_DIR)/controller.ref)" --set images.runner="$$(cat $(IMAGES_DIR)/runner.ref)" \
	  --set images.workspace="$$(cat $(IMAGES_DIR)/workspace.ref)" --set images.postgres="$$(cat $(IMAGES_DIR)/postgres.ref)"
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" \
	  go test -tags e2e ./test/e2e/ -count=1 -timeout 15m -v -ginkgo.v -ginkgo.timeout 10m -ginkgo.focus="README" || { \
	  hack/kind.sh logs test/e2e/logs; echo "e2e (helm) failed: logs are in test/e2e/logs/"; exit 1; }
	KUBECONFIG=$(KIND_KUBECONFIG) $(HELM) uninstall toolgate -n toolgate-system --wait --timeout 5m

# The commit make test-e2e upgrades from on kind (hack/deploy-previous.sh).
UPGRADE_FROM ?= HEAD~1

.PHONY: test-e2e-upgrade
test-e2e-upgrade: kind-up images images-push ## On the kind cluster: install UPGRADE_FROM's toolgate, leave calls in flight (one waiting for approval, one running in a session, a background job), upgrade to this tree's (make deploy), and check that each is decided, run and observed once, and archived.
	@rm -rf test/e2e/logs
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" hack/deploy-previous.sh $(UPGRADE_FROM)
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" \
	  go test -tags e2e ./test/e2e/ -count=1 -timeout 10m -v -ginkgo.v -ginkgo.timeout 8m -ginkgo.label-filter=upgrade-before || { \
	  hack/kind.sh logs test/e2e/logs; echo "e2e (before the upgrade) failed: logs are in test/e2e/logs/"; exit 1; }
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" $(MAKE) --no-print-directory deploy \
	  IMG="$$(cat $(IMAGES_DIR)/controller.ref)" RUNNER_IMG="$$(cat $(IMAGES_DIR)/runner.ref)" \
	  WORKSPACE_IMG="$$(cat $(IMAGES_DIR)/workspace.ref)" POSTGRES_IMG="$$(cat $(IMAGES_DIR)/postgres.ref)"
	KUBECONFIG=$(KIND_KUBECONFIG) $(ENVTEST_ASSETS)/kubectl -n toolgate-system rollout status deployment/toolgate-controller-manager --timeout=3m
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" \
	  go test -tags e2e ./test/e2e/ -count=1 -timeout 10m -v -ginkgo.v -ginkgo.timeout 8m -ginkgo.label-filter=upgrade-after || { \
	  hack/kind.sh logs test/e2e/logs; echo "e2e (after the upgrade) failed: logs are in test/e2e/logs/"; exit 1; }

.PHONY: bench-e2e
bench-e2e: ## Measure a tool call's latency on the cluster (intent to observation, beside kubectl exec; docs/benchmarks.md); without KUBECONFIG, on the kind cluster.
	@if [ -z "$$KUBECONFIG" ]; then $(MAKE) --no-print-directory local-deploy || exit 1; \
	  export E2E_WORKSPACE_IMAGE="$$(cat $(IMAGES_DIR)/workspace.ref)"; fi; \
	KUBECONFIG="$${KUBECONFIG:-$(KIND_KUBECONFIG)}" PATH="$(ENVTEST_ASSETS):$$PATH" \
	  go test -tags e2e ./test/e2e/ -count=1 -timeout $(E2E_TIMEOUT) -v -ginkgo.timeout $(E2E_GINKGO_TIMEOUT) -ginkgo.label-filter=bench

.PHONY: kind-up
kind-up: ## Build (cached) and create the kind cluster, NetworkPolicy enforced (root; see docs/kind.md).
	hack/kind.sh up

.PHONY: kind-down
kind-down: ## Delete the kind cluster.
	hack/kind.sh down

.PHONY: images
images: build ## Build the controller, runner and workspace images, the archive's PostgreSQL and the e2e suite's git server (with the notification sink, hack/notifysink), as OCI archives in bin/images/ (no container engine needed).
	@mkdir -p $(IMAGES_DIR)
	go build -o $(LOCALBIN)/ocibuild ./hack/ocibuild
	$(LOCALBIN)/ocibuild -tag $(IMG) -o $(IMAGES_DIR)/controller.tar -file $(LOCALBIN)/manager=/manager:0755 -entrypoint /manager
	$(LOCALBIN)/ocibuild -tag $(RUNNER_IMG) -o $(IMAGES_DIR)/runner.tar -file $(LOCALBIN)/runner=/runner:0755 -entrypoint /runner
	@ldd $(BUSYBOX) 2>&1 | grep -q 'not a dynamic' || \
	  { echo "$(BUSYBOX) is not a static busybox: install busybox-static or set BUSYBOX"; exit 1; }
	@[ -x $(BASH_STATIC) ] || { echo "$(BASH_STATIC) is missing: install bash-static or set BASH_STATIC"; exit 1; }
	@for f in $(GIT_BINARIES); do [ -x $$f ] || { echo "$$f is missing: install Debian's git package"; exit 1; }; done
	$(LOCALBIN)/ocibuild -tag $(WORKSPACE_IMG) -o $(IMAGES_DIR)/workspace.tar -busybox $(BUSYBOX) -file $(BASH_STATIC)=/bin/bash:0755 \
	  $$(for f in $(WORKSPACE_GIT) $$(ldd $(WORKSPACE_GIT) | awk '/=>/ {print $$3} /ld-linux/ && !/=>/ {print $$1}' | sort -u); do echo "-file $$f=$$f"; done) \
	  -dir /workspace:0775 -workdir /workspace -entrypoint /bin/sh
	CGO_ENABLED=0 go build -o $(LOCALBIN)/gitserver ./hack/gitserver
	CGO_ENABLED=0 go build -o $(LOCALBIN)/notifysink ./hack/notifysink
	$(LOCALBIN)/ocibuild -tag $(GITSERVER_IMG) -o $(IMAGES_DIR)/gitserver.tar -file $(LOCALBIN)/gitserver=/gitserver:0755 \
	  -file $(LOCALBIN)/notifysink=/notifysink:0755 \
	  $$(for f in $(GIT_BINARIES) $$(ldd $(GIT_BINARIES) | awk '/=>/ {print $$3} /ld-linux/ && !/=>/ {print $$1}' | sort -u); do echo "-file $$f=$$f"; done) \
	  -dir /repos:0777 -env PATH=/usr/bin -entrypoint /gitserver
	@for f in $(PG_BINARIES); do [ -x $$f ] || { echo "$$f is missing: install Debian's postgresql package (make postgres-deps), or set PG_VERSION to the major version it installs"; exit 1; }; done
	CGO_ENABLED=0 go build -o $(LOCALBIN)/pgserver ./hack/pgserver
	$(LOCALBIN)/ocibuild -tag $(POSTGRES_IMG) -o $(IMAGES_DIR)/postgres.tar -file $(LOCALBIN)/pgserver=/pgserver:0755 \
	  $$(for f in $(PG_BINARIES) $(PG_MODULES) $$(ldd $(PG_BINARIES) $(PG_MODULES) | awk '/=>/ {print $$3} /ld-linux/ && !/=>/ {print $$1}' | sort -u) \
	    $$(find $(PG_SHARE) /usr/share/zoneinfo -path $(PG_SHARE)/man -prune -o -xtype f -print); do echo "-file $$f=$$f"; done) \
	  -busybox $(BUSYBOX) -dir /var/lib/postgresql:0755 -env PATH=$(PG_DIR)/bin:/bin -env PGHOST=/tmp -env PGUSER=toolgate -env PGDATABASE=toolgate \
	  -env TZ=UTC -entrypoint '/pgserver --bin=$(PG_DIR)/bin'

.PHONY: images-push
images-push: ## Push the images of bin/images/ to the kind cluster's registry (KIND_REGISTRY) as toolgate/NAME:dev; each one's reference by digest is written beside its archive, as NAME.ref.
	go build -o $(LOCALBIN)/ocibuild ./hack/ocibuild
	@set -e; for i in controller runner workspace gitserver postgres; do \
	  $(LOCALBIN)/ocibuild push $(IMAGES_DIR)/$$i.tar $(KIND_REGISTRY)/toolgate/$$i:dev >$(IMAGES_DIR)/$$i.ref; \
	  echo "pushed $$(cat $(IMAGES_DIR)/$$i.ref)"; done

.PHONY: local-deploy
local-deploy: kind-up images images-push ## kind cluster up, images pushed to its registry, toolgate deployed with them by digest (a new image rolls the pods out). Only the controller's rollout is waited for: it starts without the archive's PostgreSQL.
	KUBECONFIG=$(KIND_KUBECONFIG) PATH="$(ENVTEST_ASSETS):$$PATH" $(MAKE) --no-print-directory deploy \
	  IMG="$$(cat $(IMAGES_DIR)/controller.ref)" RUNNER_IMG="$$(cat $(IMAGES_DIR)/runner.ref)" \
	  WORKSPACE_IMG="$$(cat $(IMAGES_DIR)/workspace.ref)" POSTGRES_IMG="$$(cat $(IMAGES_DIR)/postgres.ref)"
	KUBECONFIG=$(KIND_KUBECONFIG) $(ENVTEST_ASSETS)/kubectl -n toolgate-system rollout status deployment/toolgate-controller-manager --timeout=3m

.PHONY: demo
demo: ## From a fresh machine: build, kind cluster up, deploy, then walk a sample task through an approval.
	hack/demo.sh

##@ Build

.PHONY: build
build: ## Build the manager, the runner and the kubectl plugin into bin/.
	CGO_ENABLED=0 go build -ldflags '$(VERSION_LDFLAGS)' -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -o $(LOCALBIN)/runner ./cmd/runner
	CGO_ENABLED=0 go build $(PLUGIN_BUILD_FLAGS) -o $(LOCALBIN)/kubectl-toolgate ./cmd/kubectl-toolgate

.PHONY: run
run: manifests generate ## Run the controller on this machine against the cluster in KUBECONFIG.
	go run ./cmd/manager

.PHONY: docker-build
docker-build: ## Build the controller image with Docker.
	docker build -t $(IMG) .

##@ Release

# The version stamped into the manager and the plugin (internal/version), which
# `kubectl toolgate version` compares. A release sets it to its tag, vMAJOR.MINOR.PATCH:
# krew installs semantic versions only.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
VERSION_LDFLAGS = -X github.com/toolgate/toolgate/internal/version.Version=$(VERSION)
# The plugin as `make build` and `make release` build it: without the symbol table and
# DWARF (-s -w) and without this machine's paths (-trimpath); docs/cli.md, "Size".
PLUGIN_BUILD_FLAGS = -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)'
# The platforms `make release` builds the plugin for (GOOS/GOARCH; no cgo, so any).
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
# Where the release's archives are downloaded from: each platform's uri in the krew
# manifest is $(RELEASE_URL)/kubectl-toolgate_OS_ARCH.tar.gz.
RELEASE_URL ?= https://github.com/toolgate/toolgate/releases/download/$(VERSION)
DIST ?= $(shell pwd)/dist
KREW_VERSION ?= v0.4.3
KREW ?= $(LOCALBIN)/krew-$(KREW_VERSION)

.PHONY: release
release: ## Build the plugin for PLUGIN_PLATFORMS, pack each as DIST/plugin/kubectl-toolgate_OS_ARCH.tar.gz and write the krew manifest DIST/krew/toolgate.yaml (VERSION=vX.Y.Z; archives served at RELEASE_URL).
	@[ -n "$(DIST)" ] || { echo "DIST is empty: name the directory the release is written to"; exit 1; }
	rm -rf $(DIST)/plugin $(DIST)/krew $(DIST)/build
	@for p in $(PLUGIN_PLATFORMS); do \
	  echo "building kubectl-toolgate for $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build $(PLUGIN_BUILD_FLAGS) \
	    -o $(DIST)/build/$${p%/*}_$${p#*/}/kubectl-toolgate ./cmd/kubectl-toolgate || exit 1; \
	done
	go run ./hack/krewrelease -version $(VERSION) -url $(RELEASE_URL) -dist $(DIST) $(if $(wildcard LICENSE),-license LICENSE) $(DIST)/build/*
	rm -rf $(DIST)/build
	@ls -l $(DIST)/plugin

# hack/krewrelease's test installs the plugin through the manifest `make release`
# writes, with this krew: make test builds it first and names it to the test. It also
# compiles the plugin as the release does beforehand, so that the test's own
# `make release` links from the build cache instead of compiling every package
# within go test's time limit.
test: krew release-prebuild
export TOOLGATE_KREW := $(KREW)

.PHONY: release-prebuild
release-prebuild:
	CGO_ENABLED=0 go build $(PLUGIN_BUILD_FLAGS) -o /dev/null ./cmd/kubectl-toolgate

.PHONY: krew
krew: $(KREW) ## Build krew, the kubectl plugin manager, into bin/ (cached).
$(KREW):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)
	mv $(LOCALBIN)/krew $(KREW)

##@ Deployment

.PHONY: install
install: manifests ## Install CRDs and admission policies into the cluster in KUBECONFIG.
	kubectl apply -k config/crd
	kubectl create namespace toolgate-system --dry-run=client -o yaml | kubectl apply -f -
	kubectl apply -k config/admission

.PHONY: uninstall
uninstall: ## Remove CRDs and admission policies.
	kubectl delete --ignore-not-found -k config/admission
	kubectl delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: manifests build-installer ## Deploy the controller and the archive's PostgreSQL into toolgate-system from the release manifests, dist/install.yaml and dist/archive-db.yaml (the Secret toolgate-archive, with a random password, made first unless it exists). IMG, RUNNER_IMG, WORKSPACE_IMG and POSTGRES_IMG name the images.
	hack/archive-secret.sh
	kubectl apply -f dist/install.yaml -f dist/archive-db.yaml

.PHONY: undeploy
undeploy: ## Remove the controller.
	kubectl delete --ignore-not-found -k config/default

##@ Tools

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd for envtest from source into bin/k8s/ (cached).
	K8S_VERSION=$(K8S_VERSION) ETCD_VERSION=$(ETCD_VERSION) hack/envtest-assets.sh

.PHONY: oracle-deps
oracle-deps: ## Install bubblewrap (Debian's package), which the classifier's oracle test runs commands in, when bwrap is missing.
	@command -v bwrap >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }

.PHONY: browser-deps
browser-deps: ## Install Chromium (Debian's package), which the console's tests drive headless, when it is missing.
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

.PHONY: postgres-deps
postgres-deps: ## Install PostgreSQL (Debian's package), which the archive's tests start in a temporary directory, when initdb is missing.
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql >/dev/null; }

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $(CONTROLLER_GEN)

.PHONY: gremlins
gremlins: $(GREMLINS)
$(GREMLINS):
	GOBIN=$(LOCALBIN) go install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	mv $(LOCALBIN)/gremlins $(GREMLINS)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT):
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint $(GOLANGCI_LINT)

##@ Release manifests and the Helm chart (docs/install.md)

HELM_VERSION ?= v4.3.2
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)

.PHONY: build-installer
build-installer: ## Write dist/install.yaml (CRDs, admission policies, RBAC, the controller) and dist/archive-db.yaml (the archive's PostgreSQL) from config/default, with IMG, RUNNER_IMG, WORKSPACE_IMG and POSTGRES_IMG set.
	go run ./hack/installer -config config/default -o dist \
	  -controller-image $(IMG) -runner-image $(RUNNER_IMG) -workspace-image $(WORKSPACE_IMG) -postgres-image $(POSTGRES_IMG)

.PHONY: helm-lint
helm-lint: helm ## Run helm lint (strict) on dist/chart.
	$(HELM) lint --strict dist/chart

.PHONY: helm
helm: $(HELM) ## Build the helm CLI into bin/.
$(HELM):
	GOBIN=$(LOCALBIN) go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	mv $(LOCALBIN)/helm $(HELM)
