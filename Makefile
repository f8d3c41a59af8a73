# Targets for humans. C/C++ consumers use CMakeLists.txt.
#   make lib             build/libk8s_lease_wrapper.so + build/include/k8s_lease.h (and _compat.h)
#   make envtest-assets  build kube-apiserver/etcd/kubectl into the user cache
#   make envtest-server  build/bin/envtest-server
#   make test            vet + Go unit + Go integration + C++ (ctest)
#   make toolchain-check the library and ./lease/... tests with Go 1.27.3 (a download)
#   make demo            three HA replicas on a real API server: fail-over and hand-off
#                        (builds only what it runs, stage by stage, each timed)
#   make bench           k8s-lease vs plain client-go, side by side (~31 min)
#   make soak            the fault suite's churn, >= 1000 leader changes
#   make integration-ha  the fault scenarios on the HA bed (3 etcd members, 2 API servers)
#   make soak-ha         the HA bed's nemesis soak, SOAK minutes (default 60)
#   make ha-rivals       every control-plane member's faults and the noisy
#                        tenant, ours beside client-go (~10 min)
#   make fuzz            every fuzz target (FUZZTIME=100000x inputs each by default)

SHELL := /bin/bash
GO ?= go
export GOFLAGS := -mod=readonly
export CGO_ENABLED := 1

BUILD := build
LIB := $(BUILD)/libk8s_lease_wrapper.so
# Debug info is stripped from the shipped library; `make lib LIB_LDFLAGS=`
# keeps it.
LIB_LDFLAGS ?= -s -w
GO_SOURCES := $(shell find . -name '*.go' -not -path './hack/*' -not -path './$(BUILD)/*') go.mod go.sum
# The library's one recipe, CMakeLists.txt's too (flags, soname): OUT_DIR,
# then go build flags of the caller's. The compiler is make's $(CC), as
# combined-check's, so the cgo packages' compile is the same one.
BUILD_LIB = LIB_LDFLAGS='$(LIB_LDFLAGS)' GO='$(GO)' CC='$(CC)' bash hack/build-lib.sh
# What the library is built from (go list, by the script: the packages of
# this module it imports, their C files, the include/ headers, which
# capi/callbacks.c includes, go.mod, go.sum): a change elsewhere does not
# rebuild it. Should go list fail, the list is the fixed files only and go
# build, run on their change, reports why. `make demo` alone does not list
# them: its stages (sub-makes) do, after it has said what it is doing (on a
# fresh machine, go list downloads the library's modules first).
ifneq ($(MAKECMDGOALS),demo)
LIB_SOURCES := $(shell GO='$(GO)' bash hack/build-lib.sh --sources)
endif
ENVTEST_SERVER := $(BUILD)/bin/envtest-server
ASSETS_SCRIPT := hack/envtest-assets/build.sh
# Exports KUBEBUILDER_ASSETS for a recipe line; the script builds only those
# of the binaries named ($(1); none: all three) that are missing or stale,
# and prints their directory last.
with_assets_of = set -o pipefail; dir=$$(bash $(ASSETS_SCRIPT) $(1) | tail -n 1); export KUBEBUILDER_ASSETS=$$dir;
with_assets = $(call with_assets_of,)

.PHONY: panic-unit fuzz soak soak-ha ha-rivals all deps lib envtest-assets envtest-server check-deps vet tidy-check version-check header-check combined-check toolchain-check unit integration integration-packages integration-fault integration-ha cmake-build cpp-test test demo demo-programs demo-example demo-check bench clean

all: lib

lib: $(LIB)

$(LIB): $(LIB_SOURCES)
	$(BUILD_LIB) $(BUILD)
	mkdir -p $(BUILD)/include && cp include/k8s_lease.h include/k8s_lease_compat.h $(BUILD)/include/
	cp include/k8s_lease.h include/k8s_lease_compat.h $(BUILD)/

# The same library with panics injectable (K8S_LEASE_PANIC_AT), for the test
# that a panic inside it reaches C as -1. Never shipped.
PANIC_LIB := $(BUILD)/panic/libk8s_lease_wrapper.so
$(PANIC_LIB): $(LIB_SOURCES)
	$(BUILD_LIB) $(dir $@) -tags k8s_lease_panic_inject

envtest-assets:
	bash $(ASSETS_SCRIPT)

envtest-server: $(ENVTEST_SERVER)

# The test tools, like the tests and vet, are compiled with -race: a fresh
# machine then compiles client-go and Kubernetes' API types once, not once
# per build mode (-trimpath, or no -race, would each be another full compile
# of them: minutes on two cores). They only start processes and watch, so
# the race detector's cost is nothing to them; it watches them too. The
# shipped library is built apart (c-shared, -trimpath) from a smaller set of
# packages, the benchmark's programs without -race (they measure), and make
# demo's pair without -race too (see there).
TOOL_BUILD := $(GO) build -race
$(ENVTEST_SERVER): $(GO_SOURCES)
	$(TOOL_BUILD) -o $@ ./cmd/envtest-server

vet: check-deps tidy-check version-check
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "not gofmt'd: $$unformatted"; exit 1; fi
	$(GO) vet -race ./...
	$(GO) vet -race -tags integration ./...
	$(GO) vet -race -tags k8s_lease_panic_inject ./lease

# One version, VERSION (one line, MAJOR.MINOR.PATCH): CMake reads it
# (project(VERSION), so the pkg-config and find_package version files); the
# Go constant (lease.Version, K8sLeaseVersion's string) and the macros of
# include/k8s_lease.h cannot, and must equal it (capi/version_test.go, in
# the unit tests too; here it fails early).
version-check:
	$(GO) test -race -count=1 -run '^TestVersion' ./capi

# Our first user's build runs `go mod tidy` before building: it must find
# nothing to change.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy" >&2; exit 1; }

# The header cgo generates beside the library (the one our first user
# includes) compiles as strict C11 and as C++ with every warning an error,
# and declares every function the library exports with the types of
# include/k8s_lease.h and include/k8s_lease_compat.h (the same check runs
# on those two). Those declarations are written by hand in
# k8s_lease_wrapper.go's preamble; the same check then runs on the
# prototypes cgo derives from package capi's definitions (written by
# `go tool cgo -exportheader`), so declarations and definitions agree.
# Linked as C++, every declaration must resolve to the library's C symbol.
# (The directory's leading _ keeps the .go files cgo writes there out of ./...)
CAPI_HEADER_DIR := $(BUILD)/_capi-header
header-check: $(LIB)
	$(CC) -std=c11 -Wall -Wextra -Werror -pedantic -I$(BUILD) -fsyntax-only tests/header/generated_header.c
	$(CC) -std=c11 -Wall -Wextra -Werror -pedantic -DK8S_LEASE_CHECK_PUBLIC -Iinclude -fsyntax-only tests/header/generated_header.c
	$(CXX) -std=c++17 -Wall -Wextra -Werror -I$(BUILD) -fsyntax-only tests/header/generated_header.cpp
	@# Earlier code that includes k8s_lease.h only still compiles (it declares
	@# k8s_lease_compat.h's forms too), unless K8S_LEASE_NO_COMPAT is defined.
	$(CC) -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude -fsyntax-only tests/header/compat.c
	$(CXX) -x c++ -std=c++17 -Wall -Wextra -Werror -Iinclude -fsyntax-only tests/header/compat.c
	$(CC) -std=c11 -Wall -Wextra -Werror -pedantic -DK8S_LEASE_NO_COMPAT -Iinclude -fsyntax-only tests/header/compat.c
	$(CXX) -x c++ -std=c++17 -Wall -Wextra -Werror -DK8S_LEASE_NO_COMPAT -Iinclude -fsyntax-only tests/header/compat.c
	@mkdir -p $(BUILD)/_header-check
	$(CXX) -x c++ -std=c++17 -Wall -Wextra -Werror -I$(BUILD) tests/header/generated_header.c -x none \
	  -L$(BUILD) -lk8s_lease_wrapper -o $(BUILD)/_header-check/generated_header_cxx
	bash tests/header/check_exports.sh $(LIB) $(BUILD)/libk8s_lease_wrapper.h
	@# The README's C block (the first ```c after "## C") is what newcomers copy:
	@# it compiles as strict C11 against the main header and links.
	awk '/^## C$$/{c=1} c && /^```c$$/{f=1;next} f && /^```$$/{exit} f' README.md > $(BUILD)/_header-check/readme.c
	$(CC) -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude -pthread -o $(BUILD)/_header-check/readme \
	  $(BUILD)/_header-check/readme.c -L$(BUILD) -lk8s_lease_wrapper -Wl,-rpath,$(abspath $(BUILD))
	@rm -rf $(CAPI_HEADER_DIR) && mkdir -p $(CAPI_HEADER_DIR)
	cd capi && $(GO) tool cgo -objdir $(abspath $(CAPI_HEADER_DIR))/ -exportheader $(abspath $(CAPI_HEADER_DIR))/libk8s_lease_wrapper.h \
	  $$(grep -l '^import "C"' $$(ls *.go | grep -v '_test\.go$$'))
	$(CC) -std=c11 -Wall -Wextra -Werror -pedantic -DK8S_LEASE_CHECK_CAPI -I$(CAPI_HEADER_DIR) -Icapi -fsyntax-only tests/header/generated_header.c

# Our first user's combined build: embedded/k8s_lease_wrapper.go beside
# another main package file (a stand-in for their etcd_wrapper.go) in a
# scratch module that replaces this one with the checkout, go mod tidy and
# go build -buildmode=c-shared naming both files, offline; then its exports,
# its generated header and a C program that calls both files' exports
# (tests/combined/run.sh). Built with -trimpath like $(LIB), so the compiled
# client-go is the build cache's.
combined-check:
	GO=$(GO) CC=$(CC) CXX=$(CXX) bash tests/combined/run.sh

# The library and the lease package's unit tests with the newest Go the
# module proxy serves (a toolchain download; not in make test: a cold
# build cache for that Go, minutes on two cores).
TOOLCHAIN_CHECK_GO ?= go1.27.3
toolchain-check:
	@GOTOOLCHAIN=$(TOOLCHAIN_CHECK_GO) $(GO) version
	GOTOOLCHAIN=$(TOOLCHAIN_CHECK_GO) $(BUILD_LIB) $(BUILD)/toolchain-check
	GOTOOLCHAIN=$(TOOLCHAIN_CHECK_GO) $(GO) test -count=1 ./lease/...

# envtest (controller-runtime) and the Prometheus parser are for tests only,
# and client-go's typed clientset (its scheme registers every API group),
# core/v1 and tools/record (strategic merge patch, OpenAPI, protobuf
# reflection) are what package lease/kubeapi exists to avoid: none of them
# may be linked into the shared library (it was 31 MB with them, 13 MB
# without).
LIB_FORBIDDEN_DEPS := ^(sigs.k8s.io/controller-runtime|github.com/prometheus/common|k8s.io/client-go/kubernetes|k8s.io/api/core/v1$$|k8s.io/client-go/tools/record|github.com/google/gnostic-models|google.golang.org/protobuf|k8s.io/client-go/gentype|k8s.io/client-go/testing)
check-deps:
	@linked=$$($(GO) list -deps k8s_lease_wrapper.go | grep -E '$(LIB_FORBIDDEN_DEPS)' || true); \
	  if [ -n "$$linked" ]; then echo "packages the library must not link:" $$linked >&2; exit 1; fi

# Go unit tests, the injected-panic tests, and a short run of every fuzz
# target (`make fuzz FUZZTIME=10m` explores longer; the corpus lives in
# lease/internal/validate/testdata/fuzz). The targets are in a package of
# their own so that fuzzing instruments a small build, not client-go (which
# took 6.5 minutes on a machine without a build cache). A count of inputs,
# not a duration: Go 1.26's fuzz coordinator can end a timed run with
# "context deadline exceeded" and no failing input (golang/go#75804; seen
# here in CI); a count never starts that deadline.
FUZZTIME ?= 100000x
FUZZ_PACKAGE := ./lease/internal/validate
FUZZ_TARGETS := FuzzKey FuzzIdentity FuzzMillis FuzzSeconds FuzzPodLabelArguments FuzzLogLevel FuzzEndpoint
unit: panic-unit fuzz
	$(GO) test -race -count=1 ./...

panic-unit:
	$(GO) test -race -count=1 -tags k8s_lease_panic_inject -run TestInjectedPanic ./lease

# A failing run's own output is printed (a finding names its input, written
# to lease/internal/validate/testdata/fuzz).
fuzz:
	@mkdir -p $(BUILD) && for f in $(FUZZ_TARGETS); do \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $(FUZZ_PACKAGE) > $(BUILD)/fuzz.log 2>&1 || { echo "fuzz $$f failed:" >&2; \
	    grep -v '^fuzz: elapsed' $(BUILD)/fuzz.log >&2; exit 1; }; echo "fuzz $$f: $(FUZZTIME) clean"; done

# One envtest-server binary serves every integration layer. The unit tests
# carry no build tag, so this run has them too (make test runs them here
# only, not twice). Most of this stage is waiting (leases expiring, processes
# being killed and replaced: a third of two cores busy when it ran in
# sequence), so the packages and the fault suite (real candidate processes
# on the shipped .so, each scenario on a Lease of its own) run side by side,
# each with its own API server. Everything they share is built first, once:
# the kube-apiserver and etcd binaries, and the race-instrumented packages
# (`go list -export` compiles without linking; two `go test` runs would
# otherwise compile client-go twice at once on a machine without a cache).
# --output-sync prints each run's output whole, when it ends.
INTEGRATION_PACKAGES = $$($(GO) list ./... | grep -v /tests/fault)
integration: $(ENVTEST_SERVER) $(LIB)
	bash $(ASSETS_SCRIPT) >/dev/null
	$(GO) list -export -race -test -deps -tags integration ./... >/dev/null
	$(MAKE) --no-print-directory -j2 --output-sync=target integration-packages integration-fault

integration-packages:
	$(with_assets) $(GO) test -race -count=1 -parallel 6 -tags integration $(INTEGRATION_PACKAGES)

# The scenarios on the HA bed (TestHA*: 3 etcd members and 2 API servers a
# bed, and the 2-minute HA soak) run in a stage of their own,
# integration-ha, after the others: their availability bounds assume the
# machine is not also running the rest of the suite.
integration-fault:
	$(with_assets) $(GO) test -race -count=1 -parallel 3 -tags integration -v -skip '^TestHA' ./tests/fault

CLIENTGO_CANDIDATE := $(BUILD)/bin/clientgocandidate
$(CLIENTGO_CANDIDATE): $(GO_SOURCES)
	$(GO) build -o $@ ./tests/fault/clientgocandidate

integration-ha: $(ENVTEST_SERVER) $(LIB) $(CLIENTGO_CANDIDATE)
	$(with_assets) FAULT_CLIENTGO_CANDIDATE=$(CURDIR)/$(CLIENTGO_CANDIDATE) $(GO) test -race -count=1 -parallel 3 -tags integration -v -run '^TestHA' ./tests/fault

# The long churn: >= 1000 leader changes, each by a kill (about 25 minutes).
soak: $(ENVTEST_SERVER) $(LIB)
	$(with_assets) FAULT_CHURN_CHANGES=1000 FAULT_CHURN_MINUTES=40 $(GO) test -count=1 -timeout 60m -tags integration -v -run TestChurnWithKills ./tests/fault

# The HA soak: 5 candidates on 3 etcd members and 2 API servers while a
# nemesis with a printed seed kills, stops and freezes candidates, etcd
# members and API servers, for SOAK minutes (make test runs 2 of them);
# it writes its table into docs/benchmarks.md (section soak-ha).
SOAK ?= 60
soak-ha: $(ENVTEST_SERVER) $(LIB) $(CLIENTGO_CANDIDATE)
	$(with_assets) FAULT_CLIENTGO_CANDIDATE=$(CURDIR)/$(CLIENTGO_CANDIDATE) FAULT_SOAK_HA_MINUTES=$(SOAK) FAULT_SOAK_HA_PAGE=$(CURDIR)/docs/benchmarks.md $(GO) test -count=1 -timeout $$(( $(SOAK) + 15 ))m -tags integration -v -run TestHASoak ./tests/fault

# Every control-plane member's faults at 5/4/1 s and 15/10/2 s, and the
# noisy tenant with and without the FlowSchema, ours beside plain client-go
# (make test runs the short list); writes their tables into
# docs/benchmarks.md (sections member-faults-5s, member-faults-15s,
# noisy-tenant).
ha-rivals: $(ENVTEST_SERVER) $(LIB) $(CLIENTGO_CANDIDATE)
	$(with_assets) FAULT_CLIENTGO_CANDIDATE=$(CURDIR)/$(CLIENTGO_CANDIDATE) FAULT_HA_RIVALS=full FAULT_HA_RIVALS_PAGE=$(CURDIR)/docs/benchmarks.md $(GO) test -count=1 -parallel 1 -timeout 40m -tags integration -v -run '^TestHARivals' ./tests/fault

# Debian packages for the C/C++ side (installed when missing, as root).
deps:
	@bash hack/ensure-deps.sh

# The C++ tests and examples, against the library built above (Go builds it
# once).
cmake-build: deps $(LIB) $(PANIC_LIB) $(ENVTEST_SERVER)
	cmake -S . -B $(BUILD)/cmake -DK8S_LEASE_PREBUILT_LIBRARY=$(abspath $(LIB)) \
	  -DK8S_LEASE_PANIC_LIBRARY=$(abspath $(PANIC_LIB)) \
	  -DK8S_LEASE_ENVTEST_SERVER=$(abspath $(ENVTEST_SERVER)) >/dev/null
	cmake --build $(BUILD)/cmake -j 2

# Two at a time: each test program starts its own API server.
cpp-test: cmake-build
	$(with_assets) cd $(BUILD)/cmake && ctest --output-on-failure -j 2

# Stage by stage, each timed; the times are printed at the end.
# The Go unit tests run inside the integration stage (see there).
TEST_STAGES := deps vet header-check combined-check panic-unit fuzz integration integration-ha demo-check cpp-test
test:
	@mkdir -p $(BUILD) && : > $(BUILD)/test-times.txt
	@for stage in $(TEST_STAGES); do start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$stage || { echo "make test: stage $$stage failed" >&2; exit 1; }; \
	  echo "$$stage $$(( $$(date +%s) - start ))" >> $(BUILD)/test-times.txt; done
	@echo "make test: seconds per stage:"; awk '{ printf "  %-13s %4d s\n", $$1, $$2; t += $$2 } END { printf "  %-13s %4d s\n", "total", t }' $(BUILD)/test-times.txt

# The demo's run: $(1) the directory of lease-demo and envtest-server, $(2)
# the ha_server example.
run_demo = $(1)/lease-demo --ha-server $(2) --envtest-server $(1)/envtest-server

# The README's first command must keep working: make test runs the same
# demo (driver, scenario, example server) and keeps its output. It runs on
# make test's own builds (-race; cmake-build's ha_server), compiled for its
# other stages anyway: the demo's builds would be one more compile of
# client-go and Kubernetes' API types for make test on a fresh machine.
demo-check: cmake-build $(BUILD)/bin/lease-demo $(ENVTEST_SERVER)
	@$(with_assets) $(call run_demo,$(BUILD)/bin,$(BUILD)/cmake/examples/ha_server) > $(BUILD)/demo.log 2>&1 \
	  || { cat $(BUILD)/demo.log; echo "make demo failed" >&2; exit 1; }
	@grep -E "fail-over after|hand-off after|timeline picture" $(BUILD)/demo.log
	@# The picture labels the very figures the run printed.
	@for what in "fail-over:after SIGKILL" "hand-off:after SIGTERM"; do \
	  ms=$$(grep -E "$${what#*:}" $(BUILD)/demo.log | grep -oE "elected [0-9]+ ms" | grep -oE "[0-9]+"); \
	  grep -q "$${what%%:*} $$ms ms" $(BUILD)/timeline.svg \
	    || { echo "demo-check: $(BUILD)/timeline.svg does not label the $${what%%:*} of $$ms ms" >&2; exit 1; }; done

$(BUILD)/bin/lease-demo: $(GO_SOURCES)
	$(TOOL_BUILD) -o $@ ./cmd/lease-demo

# make demo builds what the demo runs and nothing else: the library, the
# two Go programs (the driver, cmd/lease-demo, and the API server program
# it starts, cmd/envtest-server), the example server, and of the test bed
# kube-apiserver and etcd (envtest starts those two; kubectl is for make
# test's tests). No test suite, no second library, no -race. The Go
# programs are built as the library is (-trimpath, no -race, the same CC
# and GOFLAGS), and as position-independent executables: -buildmode=pie
# generates code as c-shared does (-shared), so every package they share
# with the library (client-go's REST client, apimachinery, the runtime) is
# the library's compile, from the build cache. A plain or a -race build
# would compile those again. They go to $(DEMO)/bin, beside make test's
# -race builds in $(BUILD)/bin. The example is built by CMake, as users
# build it, with the C++ tests off (K8S_LEASE_BUILD_TESTS=OFF: no
# GoogleTest, no second Go library).
DEMO := $(BUILD)/demo
DEMO_PROGRAMS := $(DEMO)/bin/lease-demo $(DEMO)/bin/envtest-server
DEMO_HA_SERVER := $(DEMO)/cmake/examples/ha_server
DEMO_ASSETS := kube-apiserver etcd
DEMO_GO_BUILD := CC='$(CC)' $(GO) build -trimpath -buildmode=pie -buildvcs=false -ldflags='-s -w'

demo-programs: $(DEMO_PROGRAMS)

$(DEMO_PROGRAMS) &: $(GO_SOURCES)
	@mkdir -p $(DEMO)/bin
	$(DEMO_GO_BUILD) -o $(DEMO)/bin/ ./cmd/lease-demo ./cmd/envtest-server

demo-example: deps $(LIB)
	cmake -S . -B $(DEMO)/cmake -DK8S_LEASE_PREBUILT_LIBRARY=$(abspath $(LIB)) -DK8S_LEASE_BUILD_TESTS=OFF >/dev/null
	cmake --build $(DEMO)/cmake -j 2

# Stage by stage: each says what it does (the test bed, whether it is built
# or cached) and how long it took; the times are printed again at the end.
# First-time figures: a 2-core machine, Go module downloads apart.
demo:
	@set -o pipefail; times=; all=$$(date +%s); \
	stage() { local n=$$1 name=$$2 what=$$3 t; shift 3; echo "demo: [$$n/6] $$name: $$what"; t=$$(date +%s); \
	  "$$@" || { echo "demo: [$$n/6] $$name failed" >&2; exit 1; }; t=$$(( $$(date +%s) - t )); \
	  echo "demo: [$$n/6] $$name: $$t s"; times="$$times$${times:+, }$$name $$t s"; }; \
	setup() { bash hack/ensure-deps.sh && $(GO) list -deps ./cmd/lease-demo ./cmd/envtest-server . >/dev/null; }; \
	sub() { $(MAKE) --no-print-directory "$$@"; }; \
	stage 1 setup "Debian packages (cmake, g++); the Go modules of the library and the demo programs (the first time: a download)" setup; \
	stage 2 library "$(LIB) (hack/build-lib.sh; the first time about 40 s)" sub lib; \
	stage 3 programs "lease-demo, envtest-server into $(DEMO)/bin (the first time about 2 minutes)" sub demo-programs; \
	stage 4 example "examples/ha_server.cpp with CMake into $(DEMO)/cmake (seconds)" sub demo-example; \
	missing=$$(echo $$(bash $(ASSETS_SCRIPT) --missing $(DEMO_ASSETS))); what="kube-apiserver, etcd: cached"; \
	[ -z "$$missing" ] || what="kube-apiserver, etcd: building $$missing, the first time several minutes (up to 11 on a busy 2-core machine, the modules' download included; later runs reuse them) ..."; \
	testbed() { bash $(ASSETS_SCRIPT) $(DEMO_ASSETS) >/dev/null; }; \
	stage 5 "test bed" "$$what" testbed; \
	run() { $(call with_assets_of,$(DEMO_ASSETS)) $(call run_demo,$(DEMO)/bin,$(DEMO_HA_SERVER)); }; \
	stage 6 run "three replicas of $(DEMO_HA_SERVER) on a real API server" run; \
	echo "demo: stage times: $$times; total $$(( $$(date +%s) - all )) s"

# Side-by-side benchmark against plain client-go (about 31 minutes, of
# which the ha section 7.6; not part of `make test`). It prints the
# tables, writes build/bench.json and updates docs/benchmarks.md
# (cmd/lease-bench/page.go): the tables of the sections it ran replace
# theirs, the others stay. BENCH_FLAGS=-quick for a smoke run
# (its page goes to build/benchmarks-quick.md).
$(BUILD)/bin/abi-bench: tests/bench/abi_bench.c $(LIB)
	$(CC) -O2 -o $@ $< -I$(BUILD) -L$(BUILD) -lk8s_lease_wrapper -Wl,-rpath,$(abspath $(BUILD))

$(BUILD)/bin/lease-bench: $(GO_SOURCES)
	$(GO) build -trimpath -o $@ ./cmd/lease-bench

$(BUILD)/bin/clientgo-scale: $(GO_SOURCES)
	$(GO) build -trimpath -o $@ ./cmd/lease-bench/clientgoscale

$(BUILD)/bin/scale-child: tests/bench/scale_child.c $(LIB)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $< -I$(BUILD) -L$(BUILD) -lk8s_lease_wrapper -Wl,-rpath,$(abspath $(BUILD))

$(BUILD)/bin/load-time: tests/bench/load_time.c
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $< -ldl

# The replica program of the fault suite, for the user-pattern table.
$(BUILD)/bin/lease-candidate: tests/cpp/lease_candidate.cpp include/k8s_lease.h include/k8s_lease_compat.h $(LIB)
	$(CXX) -std=c++17 -O2 -pthread -Iinclude -o $@ $< -L$(BUILD) -lk8s_lease_wrapper -Wl,-rpath,$(abspath $(BUILD))

# BENCH_FLAGS=-only=user runs one section (see lease-bench -h).
BENCH_PROGRAMS := $(BUILD)/bin/abi-bench $(BUILD)/bin/lease-bench $(BUILD)/bin/lease-candidate \
	$(BUILD)/bin/clientgo-scale $(BUILD)/bin/scale-child $(BUILD)/bin/load-time
bench: $(LIB) $(ENVTEST_SERVER) $(BENCH_PROGRAMS)
	@$(with_assets) export ENVTEST_SERVER=$(abspath $(ENVTEST_SERVER)); \
	  $(BUILD)/bin/lease-bench -json $(BUILD)/bench.json -abi-bench $(BUILD)/bin/abi-bench \
	    -candidate $(BUILD)/bin/lease-candidate -lib $(LIB) -load-time $(BUILD)/bin/load-time \
	    -scale-child $(BUILD)/bin/scale-child -clientgo-scale $(BUILD)/bin/clientgo-scale \
	    -page docs/benchmarks.md -quick-page $(BUILD)/benchmarks-quick.md $(BENCH_FLAGS)

clean:
	rm -rf $(BUILD)
