# tensorgrad: `make` builds the library, the CLI and the examples.
CC      ?= cc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -Wall -Wextra -Wno-unused-parameter -Iinclude -MMD -MP
LDLIBS  += -lm -lpthread -ldl
BUILD   ?= build

LIB_SRC := $(wildcard src/*.c src/*/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
EX_SRC  := $(wildcard examples/*.c)
EX_OBJ  := $(EX_SRC:%.c=$(BUILD)/obj/%.o)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

.PHONY: all lib demo test bench clean help
all: lib $(BUILD)/tg

help:
	@echo "make            build build/libtensorgrad.a and the CLI build/tg"
	@echo "make demo       build and train the default example on the CPU"
	@echo "make test       build and run every test"
	@echo "make bench      benchmarks against PyTorch / OpenBLAS (needs python3-torch, libopenblas-dev)"
	@echo "make clean      remove build/"

lib: $(BUILD)/libtensorgrad.a

# The WebGPU runtime looks for the libraries scripts/fetch-webgpu.sh puts here.
$(BUILD)/obj/src/webgpu/device.o: CFLAGS += -DTG_DEPS_DIR='"$(CURDIR)/.deps"'

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libtensorgrad.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BUILD)/tg: $(BUILD)/obj/tools/tg.o $(EX_OBJ) $(BUILD)/libtensorgrad.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libtensorgrad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc $< $(BUILD)/libtensorgrad.a -o $@ $(LDLIBS)

demo: $(BUILD)/tg
	$(BUILD)/tg train sin

# The WebGPU tests run on the fetched lavapipe (CPU Vulkan) when there is no
# GPU; the fetch is a no-op once .deps/ has the files. Without a network the
# WebGPU tests say "skipped", except under CI=true where that fails the run.
test: $(TESTS) $(BUILD)/tg
	@bash scripts/fetch-webgpu.sh || [ "$${CI:-}" != true ] || { echo "make test: CI needs the WebGPU runtime"; exit 1; }
	@bash tests/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(EX_OBJ:.o=.d)
