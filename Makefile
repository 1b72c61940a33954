# tensorgrad: `make` builds the library, the CLI and the examples.
CC      ?= cc
CFLAGS  ?= -O2 -g
LDFLAGS ?=
# Flags the project needs whatever CFLAGS the caller passes.
# -Wno-psabi: GCC notes that wide vector arguments change the ABI without
# AVX; the vector helpers (src/cpu/vmath.h) are static inline, never called
# across object files, so no ABI is involved.
# -ffp-contract=off: no fused multiply-adds the source does not spell
# (GCC's default under -std=c11, not Clang's): kernels compiled for FMA
# targets must round as the portable ones, and results must not depend on
# the compiler's choice.
TG_CFLAGS := -std=c11 -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Wno-psabi -Iinclude -MMD -MP
LDLIBS  := -lm -lpthread -ldl
BUILD   ?= build
SANITIZE := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# The PyTorch peer `make bench` runs (bench/torch_ref.py, a copy, if this is missing).
TORCH_REF ?= ../shared/peers/torch_ref.py

LIB_SRC := $(wildcard src/*.c src/*/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
EX_SRC  := $(wildcard examples/*.c)
EX_OBJ  := $(EX_SRC:%.c=$(BUILD)/obj/%.o)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

.PHONY: all lib demo test test-aarch64 sanitize bench bench-digits clean help
all: lib $(BUILD)/tg

help:
	@echo "make            build build/libtensorgrad.a and the CLI build/tg"
	@echo "make demo       build and train the default example on the CPU"
	@echo "make test       build and run every test"
	@echo "make sanitize  run the tests in an ASan+UBSan build (build-asan/)"
	@echo "make test-aarch64  the CPU tests built for aarch64 (NEON) and run under qemu-user (build-aarch64/)"
	@echo "make bench      benchmarks against PyTorch / OpenBLAS (needs python3-torch, libopenblas-dev)"
	@echo "make bench CPU=avx2   the same with our CPU path, PyTorch and OpenBLAS forced to AVX2"
	@echo "make bench BACKEND=webgpu   the models on WebGPU beside PyTorch CUDA (a GPU machine)"
	@echo "make bench-digits  the digits CNN step against PyTorch CPU (needs python3-torch)"
	@echo "make clean      remove build/"

lib: $(BUILD)/libtensorgrad.a

# The WebGPU runtime looks for the libraries scripts/fetch-webgpu.sh puts here.
$(BUILD)/obj/src/webgpu/device.o: TG_CFLAGS += -DTG_DEPS_DIR='"$(CURDIR)/.deps"'

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(TG_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libtensorgrad.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BUILD)/tg: $(BUILD)/obj/tools/tg.o $(EX_OBJ) $(BUILD)/libtensorgrad.a
	$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) -Isrc $< $(BUILD)/libtensorgrad.a -o $@ $(LDLIBS)

demo: $(BUILD)/tg
	$(BUILD)/tg train addition --checkpoint $(BUILD)/addition.safetensors

# The WebGPU tests run on the fetched lavapipe (CPU Vulkan) when there is no
# GPU; the fetch is a no-op once .deps/ has the files. Without a network the
# WebGPU tests say "skipped", except under CI=true where that fails the run.
test: $(TESTS) $(BUILD)/tg
	@bash scripts/fetch-webgpu.sh || [ "$${CI:-}" != true ] || { echo "make test: CI needs the WebGPU runtime"; exit 1; }
	@bash tests/run.sh $(BUILD)

# The CPU tests cross-built for aarch64 (its NEON path, then the portable
# one) and run under qemu-user: correctness only, no WebGPU (Dawn has no
# linux-arm64 build). Debian: gcc-aarch64-linux-gnu qemu-user.
AARCH64_CC ?= aarch64-linux-gnu-gcc
AARCH64_TESTS := $(filter-out build-aarch64/tests/test_webgpu%,$(patsubst tests/%.c,build-aarch64/tests/%,$(wildcard tests/test_*.c)))
# GCC 12 for aarch64 crashes (an internal compiler error in the loop
# vectorizer) on a max-reduction loop of test_conv.c; the tests need no vectors.
build-aarch64/tests/%: CFLAGS += -fno-tree-loop-vectorize
test-aarch64:
	$(MAKE) CC=$(AARCH64_CC) AR=$(AARCH64_CC:gcc=ar) BUILD=build-aarch64 $(AARCH64_TESTS) build-aarch64/tg
	QEMU_LD_PREFIX=/usr/aarch64-linux-gnu TG_TEST_RUNNER=qemu-aarch64 bash tests/run.sh build-aarch64

# The suppressions cover only leaks inside the lavapipe driver (see the file).
sanitize:
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp $(MAKE) BUILD=build-asan CFLAGS="$(SANITIZE)" LDFLAGS="-fsanitize=address,undefined" test

# Threads: TG_THREADS=N make bench (default: every CPU). Not part of `make test`.
# BACKEND=webgpu: the models on the WebGPU backend beside PyTorch CUDA eager.
# CPU=avx2 (or avx512): our CPU path and the peers' kernels forced to it.
BACKEND ?= cpu
bench: $(BUILD)/bench/bench_tg $(BUILD)/bench/digits_bench $(BUILD)/tg
	@if [ "$(BACKEND)" = webgpu ]; then bash bench/run_webgpu.sh $(BUILD) $(TORCH_REF); \
	else CC="$(CC)" CPU="$(CPU)" bash bench/run.sh $(BUILD) $(TORCH_REF); fi

$(BUILD)/bench/bench_tg: bench/bench_tg.c $(BUILD)/obj/examples/gpt.o $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) -Isrc $^ -o $@ $(LDLIBS)

# The digits CNN row alone, ROUNDS= alternating runs of STEPS= steps per side
# (steadier than make bench's single run when other processes load the CPUs).
bench-digits: $(BUILD)/bench/digits_bench
	@bash bench/digits.sh $(BUILD)

$(BUILD)/bench/digits_bench: bench/digits_bench.c $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) $< $(BUILD)/libtensorgrad.a -o $@ $(LDLIBS)

clean:
	rm -rf $(BUILD) build-asan build-aarch64

-include $(LIB_OBJ:.o=.d) $(EX_OBJ:.o=.d)
