# tensorgrad: `make` builds the library, the CLI and the examples.
# In parallel by default; a caller's own -j (or a parent make's jobserver) wins.
ifeq ($(filter -j% --jobserver%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
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
# The system the build is for: the host's unless a cross build says otherwise
# (TARGET_OS=Darwin with a macOS cross compiler and its ar).
TARGET_OS ?= $(shell uname -s 2>/dev/null)
# Quiet by default: a short line a file ("CC src/ir/graph.c"); V=1 prints
# the whole command lines. Warnings and errors show either way.
ifeq ($(V),1)
say =
Q =
else
say = @printf '  %-4s %s\n' '$(1)' '$(2)';
Q = @
endif
SANITIZE := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# The PyTorch peer `make bench` runs (bench/torch_ref.py, a copy, if this is missing).
TORCH_REF ?= ../shared/peers/torch_ref.py

LIB_SRC := $(filter-out src/mpi/%,$(wildcard src/*.c src/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
EX_SRC  := $(wildcard examples/*.c)
EX_OBJ  := $(EX_SRC:%.c=$(BUILD)/obj/%.o)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

# MPI (data-parallel training): libtensorgrad_mpi, build/tg-mpi and the
# data-parallel test driver, built only where mpicc is found (Debian:
# libopenmpi-dev). The core library and build/tg never need MPI. mpicc
# compiles with $(CC) (Open MPI reads OMPI_CC, MPICH MPICH_CC), so a clang
# build stays clang.
MPICC    ?= mpicc
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && echo yes)
MPI_CC    = OMPI_CC="$(CC)" MPICH_CC="$(CC)" $(MPICC)
ifeq ($(HAVE_MPI),yes)
MPI_TARGETS := $(BUILD)/libtensorgrad_mpi.a $(BUILD)/tg-mpi
ifneq ($(TARGET_OS),Darwin)
MPI_TARGETS += $(BUILD)/libtensorgrad_mpi.so
endif
MPI_TESTS := $(BUILD)/tests/dp_driver $(BUILD)/tg-mpi
endif

.PHONY: all lib demo test test-samples-webgpu test-aarch64 cross-macos sanitize fuzz tsan bench bench-digits bench-dist bench-multi-gpu examples-check clean help
all: lib shared $(BUILD)/tg $(MPI_TARGETS)

help:
	@echo "make            build build/libtensorgrad.a, build/libtensorgrad.so and the CLI build/tg (one job per core unless you give -j)"
	@echo "make demo       build and train the default example on the CPU"
	@echo "make test       build and run every test (TG_TEST_JOBS at a time, default: the CPUs)"
	@echo "make test-samples-webgpu  every sample's first step on WebGPU against the CPU's (lavapipe without a GPU:"
	@echo "                about 10 minutes of shader compiles on 2 cores; CI runs it once)"
	@echo "make examples-check  train upstream's samples (pokeformer, flow, nerf, ...) for seeds 0-4 with"
	@echo "                their default flags and check each one's criterion and time (2-3 hours on 2 cores; SEEDS=0: one run each)"
	@echo "make cross-macos  build the library, tg, the dylib and the tests for macOS (arm64) and the library"
	@echo "                for Intel macOS with Zig's clang, fetched from npm (build-macos/; builds only)"
	@echo "make sanitize  run the tests in an ASan+UBSan build (build-asan/)"
	@echo "make test-aarch64  the CPU tests built for aarch64 (NEON) and run under qemu-user (build-aarch64/)"
	@echo "make fuzz       libFuzzer on the safetensors reader, the checkpoint loaders and the graph API (two targets)"
	@echo "                (clang; FUZZ_SECONDS=N each, default 45; build-fuzz/; make test runs it)"
	@echo "make tsan       the thread tests (pool, concurrent saves, sessions shared by threads) under ThreadSanitizer (build-tsan/)"
	@echo "make bench      benchmarks against PyTorch / OpenBLAS (needs python3-torch, libopenblas-dev)"
	@echo "make bench CPU=avx2   the same with our CPU path, PyTorch and OpenBLAS forced to AVX2"
	@echo "make bench BACKEND=webgpu   the models on WebGPU beside PyTorch CUDA (a GPU machine)"
	@echo "make bench-digits  the digits CNN step against PyTorch CPU (needs python3-torch)"
	@echo "make bench-dist  gpt_small's CPU step on 1 and 2 MPI ranks and its all-reduce time (needs mpicc, mpirun)"
	@echo "make bench-multi-gpu  gpt_small data-parallel on 1, 2 and 4 of this machine's GPUs beside PyTorch DDP"
	@echo "                (bench/multi_gpu.sh; needs tg-mpi, and mpirun or MPI_DEBS=DIR from scripts/fetch-mpi-debs.sh)"
	@echo "make shared     build build/libtensorgrad.so (from the objects of build/libtensorgrad.a)"
	@echo "                where mpicc is found, make also builds build/libtensorgrad_mpi.{a,so} and build/tg-mpi"
	@echo "make install    install header, libraries, tensorgrad.pc (and -static.pc), the CMake package and bin/tg"
	@echo "                under PREFIX (default /usr/local), staged under DESTDIR if set"
	@echo "make uninstall  remove what make install put under the same PREFIX and DESTDIR"
	@echo "make wasm       the library for browsers and Node (emscripten): build-wasm/package, the npm package's files"
	@echo "make bench-web  sin and addition through the WebAssembly build in Node on Dawn, beside upstream tensorgrad"
	@echo "make V=1 ...    print the whole compiler and linker command lines (one short line a file by default)"
	@echo "make clean      remove build/ and the sanitizer, fuzz, tsan, clang, aarch64 and macOS builds"

lib: $(BUILD)/libtensorgrad.a

# Install locations. Defined before WEBGPU_DIRS, which is expanded where it
# is read: later, the data directory compiled into the library was empty.
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
# Where the installed library finds the fetched WebGPU runtime (docs/install.md).
TG_DATADIR ?= $(LIBDIR)/tensorgrad

# The WebGPU runtime looks for the libraries scripts/fetch-webgpu.sh puts in
# .deps/, and, once installed, in the data directory make install fills.
WEBGPU_DIRS := -DTG_DEPS_DIR='"$(CURDIR)/.deps"' -DTG_DATA_DIR='"$(TG_DATADIR)"'
$(BUILD)/obj/src/webgpu/device.o: TG_CFLAGS += $(WEBGPU_DIRS)
$(BUILD)/obj/src/webgpu/device.o: $(BUILD)/prefix.stamp

# Library objects hide every symbol the header does not declare (the header
# marks its own default), so internal tg_ names never bind across libraries.
# One set of objects makes both libraries, so `make install` after `make
# demo` only links: -fPIC for the shared one, and -fno-semantic-interposition
# so that calls between the library's own public functions stay direct (and
# inlinable) as in the executables' default -fPIE code.
PIC := -fPIC -fno-semantic-interposition
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(TG_CFLAGS) -fvisibility=hidden $(PIC) $(CFLAGS) -c $< -o $@
# A build folder whose objects predate that recompiles them (the shared
# library cannot link objects built without -fPIC).
$(LIB_OBJ) $(BUILD)/obj/src/mpi/comm.o: $(BUILD)/pic.stamp
$(BUILD)/pic.stamp:
	@mkdir -p $(dir $@)
	@echo '$(PIC)' > $@

# Made afresh: ar replaces members by file name, and several objects share
# one (session.o, ops.o), so updating in place could keep a stale copy.
$(BUILD)/libtensorgrad.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(call say,AR,$@)rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/tg: $(BUILD)/obj/tools/tg.o $(EX_OBJ) $(BUILD)/libtensorgrad.a
	$(call say,LD,$@)$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) -Isrc $< $(BUILD)/libtensorgrad.a -o $@ $(LDLIBS)

demo: $(BUILD)/tg
	$(BUILD)/tg train addition --checkpoint $(BUILD)/addition.safetensors

# The WebGPU tests run on the fetched lavapipe (CPU Vulkan) when there is no
# GPU; the fetch is a no-op once .deps/ has the files. Without a network the
# WebGPU tests say "skipped", except under CI=true where that fails the run.
test: $(TESTS) $(BUILD)/tg $(MPI_TESTS)
	@bash scripts/fetch-webgpu.sh || [ "$${CI:-}" != true ] || { echo "make test: CI needs the WebGPU runtime"; exit 1; }
	@bash tests/run.sh $(BUILD)

# Every sample's first step on WebGPU against the CPU's; make test runs
# three of them (tests/test_samples_webgpu.sh says why not all).
test-samples-webgpu: $(BUILD)/tg
	@bash scripts/fetch-webgpu.sh || [ "$${CI:-}" != true ] || { echo "make test-samples-webgpu: CI needs the WebGPU runtime"; exit 1; }
	@bash tests/test_samples_webgpu.sh $(BUILD) --all

# Upstream's samples, each trained with its default flags for seeds 0-4
# (SEEDS=...), against its criterion and time limit; prints a table.
examples-check: $(BUILD)/tg
	@bash scripts/examples-check.sh $(BUILD)

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
	QEMU_LD_PREFIX=/usr/aarch64-linux-gnu TG_TEST_RUNNER=qemu-aarch64 TG_TEST_NO_WEBGPU=1 bash tests/run.sh build-aarch64

# macOS, cross-built here with Zig's clang and macOS headers (fetched from
# npm into .deps/zig): the library, tg, the dylib and every test for
# aarch64-macos, the library for x86_64-macos. Builds only; see the script.
cross-macos:
	bash scripts/cross-macos.sh build-macos

# The suppressions cover only leaks inside the lavapipe driver (see the file).
# LeakSanitizer leaves thread-local storage out of its roots (use_tls=0):
# once the plain run has filled lavapipe's disk shader cache, its scan at
# exit crashed ("Tracer caught signal 11") on a bad dynamic-TLS range of a
# thread the cache starts (test_numerics, GCC 12's libsanitizer), although
# every check had passed. Without the cache the WebGPU suites take 20 times
# longer. Fewer roots can only report more leaks, never hide one.
sanitize:
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:use_tls=0 $(MAKE) BUILD=build-asan CFLAGS="$(SANITIZE)" LDFLAGS="-fsanitize=address,undefined" test

# libFuzzer needs clang; the library is built instrumented in build-fuzz/.
# -O0: clang with ASan takes many minutes per GEMM file at -O1.
# The seeds are files the library writes (fuzz/seed.c).
FUZZ_SECONDS ?= 45
FUZZ_CFLAGS := -O0 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fuzz: $(BUILD)/libtensorgrad.a
	$(MAKE) BUILD=build-fuzz CC=clang CFLAGS="$(FUZZ_CFLAGS)" lib
	bash fuzz/run.sh build-fuzz $(BUILD) $(FUZZ_SECONDS)

TSAN_TESTS := test_pool test_saves test_session_threads
tsan:
	$(MAKE) BUILD=build-tsan CFLAGS="-O1 -g -fsanitize=thread" LDFLAGS=-fsanitize=thread \
		$(TSAN_TESTS:%=build-tsan/tests/%)
	@for t in $(TSAN_TESTS); do TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/$$t || exit 1; done

# Threads: TG_THREADS=N make bench (default: every CPU). Not part of `make test`.
# BACKEND=webgpu: the models on the WebGPU backend beside PyTorch CUDA eager.
# CPU=avx2 (or avx512): our CPU path and the peers' kernels forced to it.
BACKEND ?= cpu
bench: $(BUILD)/bench/bench_tg $(BUILD)/bench/digits_bench $(BUILD)/tg
	@if [ "$(BACKEND)" = webgpu ]; then bash bench/run_webgpu.sh $(BUILD) $(TORCH_REF); \
	else CC="$(CC)" CPU="$(CPU)" bash bench/run.sh $(BUILD) $(TORCH_REF); fi

$(BUILD)/bench/bench_tg: bench/bench_tg.c $(BUILD)/obj/examples/gpt.o $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) -Isrc $^ -o $@ $(LDLIBS)

# The digits CNN row alone, ROUNDS= alternating runs of STEPS= steps per side
# (steadier than make bench's single run when other processes load the CPUs).
bench-digits: $(BUILD)/bench/digits_bench
	@bash bench/digits.sh $(BUILD)

$(BUILD)/bench/digits_bench: bench/digits_bench.c $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) $< $(BUILD)/libtensorgrad.a -o $@ $(LDLIBS)

# Not a test: step times of gpt_small on 1 and 2 ranks (CPU), and the
# all-reduce's share (docs/distributed.md reads the numbers).
bench-dist: $(BUILD)/tg $(MPI_TARGETS) $(MPI_TESTS)
	@bash bench/dist.sh $(BUILD)

# Not a test: gpt_small on R GPUs (tg-mpi --dp --backend webgpu) beside
# PyTorch DDP, scaling efficiency and all-reduce time (docs/distributed.md).
bench-multi-gpu: $(BUILD)/tg $(MPI_TARGETS)
	@bash bench/multi_gpu.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-aarch64 build-fuzz build-tsan build-clang build-macos build-wasm

# ---- install: the shared library, pkg-config, the CMake package ----
VERSION := $(shell sed -n 's/^\#define TG_VERSION_STRING "\(.*\)"/\1/p' include/tensorgrad.h)
VMAJOR  := $(word 1,$(subst ., ,$(VERSION)))
VMINOR  := $(word 2,$(subst ., ,$(VERSION)))
# Before 1.0 every minor release may change the ABI, so the soname carries it.
SOVER   := $(if $(filter 0,$(VMAJOR)),$(VMAJOR).$(VMINOR),$(VMAJOR))
SONAME  := libtensorgrad.so.$(SOVER)
.PHONY: shared install uninstall

shared: $(BUILD)/libtensorgrad.so

# Rebuilds device.o when PREFIX changes (it holds the data directory's path).
$(BUILD)/prefix.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(TG_DATADIR)' | cmp -s - $@ || echo '$(TG_DATADIR)' > $@
FORCE:

# The exported symbols are the functions the header declares (a line that
# starts with the return type), so internal tg_ helpers stay hidden.
$(BUILD)/tensorgrad.syms: include/tensorgrad.h
	@mkdir -p $(dir $@)
	$(call say,GEN,$@)grep -oE '^[a-z0-9_ ]*[ *](tg_[a-z0-9_]+)\(' $< | grep -oE 'tg_[a-z0-9_]+\($$' | tr -d '(' | sort -u > $@
# GNU ld: a version script that exports those names and hides the rest.
$(BUILD)/tensorgrad.map: $(BUILD)/tensorgrad.syms
	$(call say,GEN,$@){ echo '/* generated from include/tensorgrad.h */'; echo '{ global:'; sed 's/$$/;/' $<; echo 'local: *; };'; } > $@
# Apple's ld: an exported-symbols list (C names carry a leading underscore).
$(BUILD)/tensorgrad.exp: $(BUILD)/tensorgrad.syms
	$(call say,GEN,$@)sed 's/^/_/' $< > $@

# Apple's linker takes neither version scripts nor sonames (nor needs
# --no-undefined: it refuses undefined symbols by default); macOS gets an
# install name and the exported-symbols list instead (cross-built by make
# cross-macos; never run here).
ifeq ($(TARGET_OS),Darwin)
# Files that ask for _POSIX_C_SOURCE would otherwise lose what macOS adds to
# POSIX (sysconf's _SC_NPROCESSORS_ONLN among it).
TG_CFLAGS += -D_DARWIN_C_SOURCE
SHARED_EXPORTS := $(BUILD)/tensorgrad.exp
SHARED_FLAGS := -dynamiclib -Wl,-install_name,@rpath/$(SONAME) -Wl,-exported_symbols_list,$(SHARED_EXPORTS)
else
SHARED_EXPORTS := $(BUILD)/tensorgrad.map
SHARED_FLAGS := -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(SHARED_EXPORTS) -Wl,--no-undefined
endif

$(BUILD)/libtensorgrad.so: $(LIB_OBJ) $(SHARED_EXPORTS)
	$(call say,LD,$@)$(CC) $(SHARED_FLAGS) $(CFLAGS) $(LDFLAGS) $(LIB_OBJ) -o $@.$(VERSION) $(LDLIBS)
	$(Q)ln -sf libtensorgrad.so.$(VERSION) $(BUILD)/$(SONAME)
	$(Q)ln -sf libtensorgrad.so.$(VERSION) $@

D := $(DESTDIR)
install: $(BUILD)/libtensorgrad.a $(BUILD)/libtensorgrad.so $(BUILD)/tg $(MPI_TARGETS)
	install -d $(D)$(INCLUDEDIR) $(D)$(LIBDIR)/pkgconfig $(D)$(LIBDIR)/cmake/tensorgrad $(D)$(BINDIR)
	install -m 644 include/tensorgrad.h $(D)$(INCLUDEDIR)/
	install -m 644 $(BUILD)/libtensorgrad.a $(D)$(LIBDIR)/
	install -m 755 $(BUILD)/libtensorgrad.so.$(VERSION) $(D)$(LIBDIR)/
	ln -sf libtensorgrad.so.$(VERSION) $(D)$(LIBDIR)/$(SONAME)
	ln -sf libtensorgrad.so.$(VERSION) $(D)$(LIBDIR)/libtensorgrad.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
	    pkg/tensorgrad.pc.in > $(D)$(LIBDIR)/pkgconfig/tensorgrad.pc
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
	    pkg/tensorgrad-static.pc.in > $(D)$(LIBDIR)/pkgconfig/tensorgrad-static.pc
	sed -e 's|@VERSION@|$(VERSION)|g; s|@SONAME@|$(SONAME)|g' \
	    -e 's|@TO_PREFIX@|$(shell sh pkg/relpath.sh $(LIBDIR)/cmake/tensorgrad $(PREFIX))|' \
	    -e 's|@LIB_REL@|$(shell sh pkg/relpath.sh $(PREFIX) $(LIBDIR))|' \
	    -e 's|@INCLUDE_REL@|$(shell sh pkg/relpath.sh $(PREFIX) $(INCLUDEDIR))|' \
	    pkg/tensorgrad-config.cmake.in > $(D)$(LIBDIR)/cmake/tensorgrad/tensorgrad-config.cmake
	sed -e 's|@VERSION@|$(VERSION)|g' pkg/tensorgrad-config-version.cmake.in \
	    > $(D)$(LIBDIR)/cmake/tensorgrad/tensorgrad-config-version.cmake
	install -m 755 $(BUILD)/tg $(D)$(BINDIR)/
ifeq ($(HAVE_MPI),yes)
	install -m 644 include/tensorgrad_mpi.h $(D)$(INCLUDEDIR)/
	install -m 644 $(BUILD)/libtensorgrad_mpi.a $(D)$(LIBDIR)/
	$(if $(filter %.so,$(MPI_TARGETS)),install -m 755 $(BUILD)/libtensorgrad_mpi.so.$(VERSION) $(D)$(LIBDIR)/ && \
	    ln -sf libtensorgrad_mpi.so.$(VERSION) $(D)$(LIBDIR)/$(MPI_SONAME) && \
	    ln -sf libtensorgrad_mpi.so.$(VERSION) $(D)$(LIBDIR)/libtensorgrad_mpi.so)
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|g' \
	    -e 's|@MPI_CFLAGS@|$(MPI_CFLAGS)|; s|@MPI_LIBS@|$(MPI_LIBS)|' \
	    pkg/tensorgrad_mpi.pc.in > $(D)$(LIBDIR)/pkgconfig/tensorgrad_mpi.pc
	install -m 755 $(BUILD)/tg-mpi $(D)$(BINDIR)/
endif
	@bash pkg/install-runtime.sh .deps "$(D)" "$(TG_DATADIR)"

uninstall:
	rm -f $(D)$(INCLUDEDIR)/tensorgrad.h $(D)$(LIBDIR)/libtensorgrad.a $(D)$(LIBDIR)/libtensorgrad.so* \
	    $(D)$(LIBDIR)/pkgconfig/tensorgrad.pc $(D)$(LIBDIR)/pkgconfig/tensorgrad-static.pc $(D)$(BINDIR)/tg
	rm -f $(D)$(INCLUDEDIR)/tensorgrad_mpi.h $(D)$(LIBDIR)/libtensorgrad_mpi.a $(D)$(LIBDIR)/libtensorgrad_mpi.so* \
	    $(D)$(LIBDIR)/pkgconfig/tensorgrad_mpi.pc $(D)$(BINDIR)/tg-mpi
	rm -rf $(D)$(LIBDIR)/cmake/tensorgrad $(D)$(TG_DATADIR)

# ---- libtensorgrad_mpi, tg-mpi, the data-parallel test driver (HAVE_MPI) ----
MPI_SONAME := libtensorgrad_mpi.so.$(SOVER)
MPI_CFLAGS := $(if $(HAVE_MPI),$(shell $(MPICC) --showme:compile 2>/dev/null))
MPI_LIBS   := $(if $(HAVE_MPI),$(shell $(MPICC) --showme:link 2>/dev/null))
MPI_OBJ    := $(BUILD)/obj/src/mpi/comm.o $(BUILD)/obj/tools/tg_mpi.o

$(BUILD)/obj/src/mpi/%.o: src/mpi/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(MPI_CC) $(TG_CFLAGS) -fvisibility=hidden $(PIC) $(CFLAGS) -c $< -o $@

$(BUILD)/libtensorgrad_mpi.a: $(BUILD)/obj/src/mpi/comm.o
	$(call say,AR,$@)$(AR) rcs $@ $^

$(BUILD)/libtensorgrad_mpi.so: $(BUILD)/obj/src/mpi/comm.o $(BUILD)/libtensorgrad.so
	$(call say,LD,$@)$(MPI_CC) -shared -Wl,-soname,$(MPI_SONAME) -Wl,--no-undefined $(CFLAGS) $(LDFLAGS) $< -o $@.$(VERSION) \
	    -L$(BUILD) -ltensorgrad
	$(Q)ln -sf libtensorgrad_mpi.so.$(VERSION) $(BUILD)/$(MPI_SONAME)
	$(Q)ln -sf libtensorgrad_mpi.so.$(VERSION) $@

# tg with --dp: the same CLI and examples, its main built with TG_WITH_MPI.
$(BUILD)/obj/tools/tg_mpi.o: tools/tg.c
	@mkdir -p $(dir $@)
	$(call say,CC,$< (MPI))$(MPI_CC) $(TG_CFLAGS) $(CFLAGS) -DTG_WITH_MPI -c $< -o $@

$(BUILD)/tg-mpi: $(BUILD)/obj/tools/tg_mpi.o $(EX_OBJ) $(BUILD)/libtensorgrad_mpi.a $(BUILD)/libtensorgrad.a
	$(call say,LD,$@)$(MPI_CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/dp_driver: tests/dp_driver.c $(wildcard tests/*.h) $(BUILD)/obj/examples/gpt.o $(BUILD)/libtensorgrad_mpi.a \
                          $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(MPI_CC) $(TG_CFLAGS) $(CFLAGS) $(LDFLAGS) $< $(BUILD)/obj/examples/gpt.o $(BUILD)/libtensorgrad_mpi.a \
	    $(BUILD)/libtensorgrad.a -o $@ $(LDLIBS)

# make wasm, make bench-web: the WebAssembly build and the JavaScript API (web/).
include web/web.mk

-include $(LIB_OBJ:.o=.d) $(EX_OBJ:.o=.d) $(BUILD)/obj/tools/tg.d $(MPI_OBJ:.o=.d)
