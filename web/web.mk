# The WebAssembly build (make wasm) and the web benchmark (make bench-web),
# included by the Makefile. The library's own C sources, compiled unchanged
# by emscripten (Debian's emscripten 3.1.6), plus web/src/bridge.c, the calls
# the JavaScript API makes; web/src/*.js implement what the C code imports
# (WebGPU over the host's JavaScript API, the traced JavaScript functions).
# The npm package is assembled in $(WASM_BUILD)/package and packed there.
EMCC       ?= emcc
WASM_BUILD ?= build-wasm
# 128-bit WASM SIMD: every current browser engine and Node have it.
WASM_CFLAGS ?= -O2 -msimd128
WASM_SRC   := $(LIB_SRC) web/src/bridge.c
WASM_OBJ   := $(WASM_SRC:%.c=$(WASM_BUILD)/obj/%.o)
WASM_PKG   := $(WASM_BUILD)/package
WASM_JS_LIBS := web/src/webgpu_host.js web/src/js_host.js
# The public C functions the JavaScript side calls directly (the bridge's
# tgw_* functions are kept by their EMSCRIPTEN_KEEPALIVE).
WASM_EXPORT_LIST := malloc free tg_version tg_last_error tg_status_name tg_model_new tg_model_free \
	tg_model_freeze tg_model_status tg_session_free tg_forward_free tg_safetensors_free tg_safetensors_count \
	tg_session_save_params tg_session_load_params tg_session_save tg_session_load tg_forward_save_params \
	tg_forward_load_params tg_graph_status
wasm_comma := ,
wasm_space := $(subst ,, )
WASM_EXPORTS := $(subst $(wasm_space),$(wasm_comma),$(strip $(WASM_EXPORT_LIST:%=_%)))
# web,worker: in Node, web/index.js reads the .wasm itself (emscripten's
# Node loader is CommonJS). The WebGPU functions wait for the host's promises by suspending the C
# stack (Asyncify): every call that may reach wgpuInstanceWaitAny is awaited
# in JavaScript. The optimizer needs acorn, which Debian ships in /usr/share/nodejs.
WASM_LDFLAGS := -sMODULARIZE -sEXPORT_ES6 -sEXPORT_NAME=createCore -sENVIRONMENT=web,worker \
	-sALLOW_MEMORY_GROWTH -sWASM_BIGINT -sASYNCIFY -sASYNCIFY_IMPORTS=[wgpuInstanceWaitAny] \
	-sASYNCIFY_STACK_SIZE=65536 -sEXPORTED_FUNCTIONS=[$(WASM_EXPORTS)] \
	-sEXPORTED_RUNTIME_METHODS=[ccall,UTF8ToString,stringToUTF8,lengthBytesUTF8,FS] \
	$(WASM_JS_LIBS:%=--js-library %)
WEB_FILES  := index.js index.d.ts README.md package.json

.PHONY: wasm wasm-pack wasm-tests
wasm: $(WASM_PKG)/tensorgrad_core.js $(WEB_FILES:%=$(WASM_PKG)/%) $(WASM_PKG)/LICENSE

$(WASM_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(call say,EMCC,$<)$(EMCC) $(TG_CFLAGS) $(WASM_CFLAGS) -c $< -o $@

$(WASM_PKG)/tensorgrad_core.js: $(WASM_OBJ) $(WASM_JS_LIBS)
	@mkdir -p $(dir $@)
	$(call say,EMLD,$@)NODE_PATH=/usr/share/nodejs $(EMCC) $(WASM_CFLAGS) $(WASM_LDFLAGS) $(WASM_LDEXTRA) $(WASM_OBJ) -o $@

$(WASM_PKG)/%: web/%
	@mkdir -p $(dir $@)
	$(Q)cp $< $@
$(WASM_PKG)/LICENSE: LICENSE
	$(Q)cp $< $@

# The npm package: $(WASM_BUILD)/tensorgrad-wasm-<version>.tgz.
wasm-pack: wasm
	cd $(WASM_BUILD) && npm pack --silent ./package

-include $(WASM_OBJ:.o=.d)

# The tests' programs: the op-case parity harness built for WebAssembly (run
# by web/test/parity.mjs in Node on the host's WebGPU; tests/test_web.sh).
wasm-tests: $(WASM_BUILD)/tests/parity.js
WASM_TEST_LDFLAGS := -sMODULARIZE -sEXPORT_ES6 -sEXPORT_NAME=createParity -sENVIRONMENT=web,worker \
	-sALLOW_MEMORY_GROWTH -sWASM_BIGINT -sASYNCIFY -sASYNCIFY_IMPORTS=[wgpuInstanceWaitAny] \
	-sASYNCIFY_STACK_SIZE=65536 --js-library web/src/webgpu_host.js
$(WASM_BUILD)/tests/parity.js: web/test/parity.c $(filter-out %/bridge.o,$(WASM_OBJ)) $(wildcard tests/*.h) web/src/webgpu_host.js
	@mkdir -p $(dir $@)
	$(call say,EMLD,$@)NODE_PATH=/usr/share/nodejs $(EMCC) $(TG_CFLAGS) -Wno-unused-function -Isrc $(WASM_CFLAGS) $(WASM_TEST_LDFLAGS) $< \
		$(filter-out %/bridge.o,$(WASM_OBJ)) -o $@

# The web benchmark: sin and addition through the WebAssembly build in Node
# on npm's webgpu (Dawn), beside upstream tensorgrad 0.4.6 in the same Node
# and Dawn (web/bench/bench.mjs; a GPU machine). Fetches npm's webgpu and
# builds upstream first (scripts/fetch-web.sh, scripts/fetch-upstream.sh).
.PHONY: bench-web
bench-web: wasm
	@bash scripts/fetch-web.sh && bash scripts/fetch-upstream.sh
	node web/bench/bench.mjs $(BENCH_WEB_ARGS)
