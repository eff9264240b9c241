# Quick start (README): `make run` builds and runs the demo job; `make test` builds and passes the
# tests. Each installs what it needs with apt on Debian 12.
BUILD ?= build
JOBS ?= $(shell nproc)

# What `make run` needs: a compiler and CMake (the GPU machine has them; apt installs them elsewhere).
RUN_PACKAGES := g++ cmake make
# What the full test suite needs, as CI runs it.
TEST_PACKAGES := $(RUN_PACKAGES) git pkg-config clang-format clang-tidy libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler nlohmann-json3-dev libcpp-httplib-dev \
  libssl-dev libyaml-cpp-dev python3 python3-yaml binutils curl

.PHONY: run test build deps-run deps-test bench clean

deps-run:
	@scripts/install-deps.sh $(RUN_PACKAGES)

deps-test:
	@scripts/install-deps.sh $(TEST_PACKAGES)

run: deps-run
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS) --target gpuslice_preload gpuslice_cli gpuslice-demo gpuslice_mock_cuda gpuslice_mock_nvml
	scripts/demo.sh $(BUILD)

test: deps-test
	scripts/test.sh

bench: deps-test
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DGPUSLICE_BUILD_BENCH=ON >/dev/null
	cmake --build $(BUILD) -j$(JOBS)
	scripts/bench.sh $(BUILD)

clean:
	rm -rf build build-*
