# Common paths. `make test` is what CI runs (through .ci/run); `make demo` is the README's main job.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The users' build (-O3), which is also what `make test` (CI) builds and tests, with warnings as errors: a
# warning that only -O3 raises (GCC 12's -Wrestrict false positives) cannot come back unseen. For debugging,
# `make build BUILD_TYPE=RelWithDebInfo` (the sanitizer build of the unit tests keeps line tables anyway).
BUILD_TYPE ?= Release
# RelWithDebInfo with line tables (-g1) instead of full debug info: backtraces, breakpoints and sanitizer
# reports keep file:line, and the cold build (CI's longest step) is about a third cheaper per file than with
# -g (src/runtime/engine.cpp: 13.2 → 9.1 s). Full debug info: `make build DEBUG_INFO=-g`.
DEBUG_INFO ?= -g1
DEV_FLAGS = -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_INFO) -DNDEBUG" \
            -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -Xcompiler=$(DEBUG_INFO) -DNDEBUG"

.PHONY: all build deps test test-unit test-asan test-python fuzz demo clean format test-cuda

all: build

deps:
	bash scripts/setup-deps.sh

# Developer and CI builds treat warnings as errors; a plain `cmake` (a user's build) does not.
build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DGRIDQ_WERROR=ON $(DEV_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: deps build
	bash scripts/run-tests.sh

test-cuda: build
	$(BUILD)/tests/test_cuda

demo: deps build
	bash scripts/demo.sh

format:
	clang-format -i $$(git ls-files 'src/*.cpp' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cpp' 'tests/*.cu')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
