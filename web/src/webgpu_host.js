// The WebGPU C functions src/webgpu uses (src/webgpu/wg_api.h), implemented
// over the host's JavaScript WebGPU: navigator.gpu in a browser, npm's
// `webgpu` (Dawn) in Node, passed in as Module.gpu. An emscripten JS
// library (--js-library), linked into the WebAssembly build only.
//
// Written for emscripten 3.1.6's JS optimizer: no destructuring, and the
// WG object's state made in its postset (object values in a library are
// copied as text). Handles are small integers indexing WG.objs. Structs are read and written
// at the wasm32 offsets wg_api.h pins with static asserts. Futures resolve
// from JavaScript promises; wgpuInstanceWaitAny sleeps (Asyncify) until one
// has, then runs its callback, so the C code waits as it does natively
// while the page's event loop keeps running. Callbacks that may come at any
// time (device lost, uncaptured errors) are queued and delivered at the next
// wait, ProcessEvents or call into the library (Module.tgFlushEvents).

mergeInto(LibraryManager.library, {
  $WG__deps: ['malloc', 'free'],
  $WG__postset: "WG.objs = [undefined]; WG.freeIds = []; WG.futures = new Map(); WG.nextFuture = 1; WG.events = [];" +
    "Module['tgFlushEvents'] = function () { WG.flushEvents(); };",
  $WG: {
    add: function (o) {
      if (!o) return 0;
      const id = WG.freeIds.length ? WG.freeIds.pop() : WG.objs.length;
      WG.objs[id] = o;
      return id;
    },
    get: function (id) { return WG.objs[id]; },
    drop: function (id) {
      if (id && WG.objs[id] !== undefined) { WG.objs[id] = undefined; WG.freeIds.push(id); }
    },
    u32: function (p) { return HEAPU32[p >> 2]; },
    u64: function (p) { return HEAPU32[p >> 2] + HEAPU32[(p + 4) >> 2] * 4294967296; },
    put64: function (p, v) { HEAPU32[p >> 2] = v % 4294967296; HEAPU32[(p + 4) >> 2] = Math.floor(v / 4294967296); },
    // wg_str {data, length}; length 0xffffffff (WG_STRLEN): NUL-terminated.
    str: function (p) {
      const data = HEAPU32[p >> 2], len = HEAPU32[(p + 4) >> 2];
      if (!data) return '';
      return len === 4294967295 ? UTF8ToString(data) : UTF8ToString(data, len);
    },
    // A wg_str of s in fresh memory (the string malloc'd too): its address.
    newStr: function (s) {
      const n = lengthBytesUTF8(s) + 1, data = _malloc(n), p = _malloc(8);
      stringToUTF8(s, data, n);
      HEAPU32[p >> 2] = data;
      HEAPU32[(p + 4) >> 2] = n - 1;
      return p;
    },
    freeStr: function (p) { _free(HEAPU32[p >> 2]); _free(p); },
    // Callback-info structs (wg_*_cb_info): next, mode, callback, u1, u2.
    cbInfo: function (p) { return { fn: HEAPU32[(p + 8) >> 2], u1: HEAPU32[(p + 12) >> 2], u2: HEAPU32[(p + 16) >> 2] }; },
    call: function (fn, args) { wasmTable.get(fn).apply(null, args); },
    // A future that completes when promise settles; fire(value) then runs the
    // C callback. Returns its id (the wg_future, an i64).
    future: function (promise, fire) {
      const id = WG.nextFuture++;
      const f = { done: false, value: undefined, fire: fire };
      f.promise = promise.then(v => { f.value = v; f.done = true; }, e => { f.value = e; f.error = true; f.done = true; });
      WG.futures.set(id, f);
      return BigInt(id);
    },
    flushEvents: function () {
      while (WG.events.length) WG.events.shift()();
    },
    // wg_limits at the wasm32 offsets (wg_api.h): [JavaScript name, offset, 64-bit].
    limitFields: [
      ['maxTextureDimension1D', 4], ['maxTextureDimension2D', 8], ['maxTextureDimension3D', 12],
      ['maxTextureArrayLayers', 16], ['maxBindGroups', 20], ['maxBindGroupsPlusVertexBuffers', 24],
      ['maxBindingsPerBindGroup', 28], ['maxDynamicUniformBuffersPerPipelineLayout', 32],
      ['maxDynamicStorageBuffersPerPipelineLayout', 36], ['maxSampledTexturesPerShaderStage', 40],
      ['maxSamplersPerShaderStage', 44], ['maxStorageBuffersPerShaderStage', 48],
      ['maxStorageTexturesPerShaderStage', 52], ['maxUniformBuffersPerShaderStage', 56],
      ['maxUniformBufferBindingSize', 64, true], ['maxStorageBufferBindingSize', 72, true],
      ['minUniformBufferOffsetAlignment', 80], ['minStorageBufferOffsetAlignment', 84], ['maxVertexBuffers', 88],
      ['maxBufferSize', 96, true], ['maxVertexAttributes', 104], ['maxVertexBufferArrayStride', 108],
      ['maxInterStageShaderVariables', 112], ['maxColorAttachments', 116], ['maxColorAttachmentBytesPerSample', 120],
      ['maxComputeWorkgroupStorageSize', 124], ['maxComputeInvocationsPerWorkgroup', 128],
      ['maxComputeWorkgroupSizeX', 132], ['maxComputeWorkgroupSizeY', 136], ['maxComputeWorkgroupSizeZ', 140],
      ['maxComputeWorkgroupsPerDimension', 144], ['maxImmediateSize', 148],
    ],
    putLimits: function (p, limits) {
      HEAPU8.fill(0, p + 4, p + 152);
      WG.limitFields.forEach(function (f) {
        const v = limits[f[0]];
        if (typeof v !== 'number') return;
        if (f[2]) WG.put64(p + f[1], v); else HEAPU32[(p + f[1]) >> 2] = Math.min(v, 4294967295);
      });
    },
    // Optional features by their webgpu.h numbers of 2025-06-18 (wg_api.h).
    featureNames: ['', 'depth-clip-control', 'depth32float-stencil8', 'timestamp-query',
      'texture-compression-bc', 'texture-compression-bc-sliced-3d', 'texture-compression-etc2',
      'texture-compression-astc', 'texture-compression-astc-sliced-3d', 'indirect-first-instance', 'shader-f16',
      'rg11b10ufloat-renderable', 'bgra8unorm-storage', 'float32-filterable', 'float32-blendable',
      'clip-distances', 'dual-source-blending', 'subgroups', 'core-features-and-limits'],
    errorType: function (e) {
      if (!e) return 1; // none
      const name = e.constructor && e.constructor.name;
      if (name === 'GPUValidationError') return 2;
      if (name === 'GPUOutOfMemoryError') return 3;
      if (name === 'GPUInternalError') return 4;
      return 5;
    },
    // A software adapter (the CPU): SwiftShader, lavapipe/llvmpipe.
    isCpu: function (a, info) {
      const s = [info.vendor, info.architecture, info.device, info.description].join(' ');
      return !!(a.isFallbackAdapter || info.isFallbackAdapter || /llvmpipe|lavapipe|swiftshader/i.test(s));
    },
  },

  wgpuCreateInstance__deps: ['$WG'],
  wgpuCreateInstance: function (desc) {
    const gpu = Module['gpu'];
    return gpu ? WG.add({ gpu: gpu }) : 0;
  },

  wgpuInstanceRequestAdapter__deps: ['$WG'],
  wgpuInstanceRequestAdapter: function (inst, opts, info) {
    const cb = WG.cbInfo(info), gpu = WG.get(inst).gpu;
    const power = opts && HEAPU32[(opts + 8) >> 2] === 1 ? 'low-power' : 'high-performance';
    return WG.future(gpu.requestAdapter({ powerPreference: power }), (a, err) => {
      const msg = WG.newStr(err ? String(err) : a ? '' : 'no WebGPU adapter (navigator.gpu.requestAdapter gave none)');
      WG.call(cb.fn, [a && !err ? 1 : 3, a && !err ? WG.add(a) : 0, msg, cb.u1, cb.u2]);
      WG.freeStr(msg);
    });
  },

  wgpuInstanceWaitAny__deps: ['$WG', '$Asyncify'],
  wgpuInstanceWaitAny: function (inst, count, waits, timeout) {
    WG.flushEvents();
    const ready = () => {
      for (let i = 0; i < count; i++) {
        const f = WG.futures.get(HEAPU32[(waits + 16 * i) >> 2]);
        if (f && f.done) return i;
      }
      return -1;
    };
    // Asleep: wake when any of the futures settles. Rewinding: the wake-up
    // came; handleSleep finishes the rewind and the code below runs.
    if (ready() < 0 || Asyncify.state === Asyncify.State.Rewinding) {
      const sleeping = Asyncify.state === Asyncify.State.Normal;
      Asyncify.handleSleep(wakeUp => {
        const ps = [];
        for (let i = 0; i < count; i++) {
          const f = WG.futures.get(HEAPU32[(waits + 16 * i) >> 2]);
          if (f) ps.push(f.promise);
        }
        (ps.length ? Promise.race(ps) : Promise.resolve()).then(() => wakeUp(0));
      });
      if (sleeping) return 0;
    }
    const i = ready();
    if (i < 0) return 3; // WG_WAIT_ERROR: an unknown future
    const id = HEAPU32[(waits + 16 * i) >> 2], f = WG.futures.get(id);
    WG.futures.delete(id);
    HEAPU32[(waits + 16 * i + 8) >> 2] = 1;
    f.fire(f.error ? undefined : f.value, f.error ? f.value : undefined);
    return 1;
  },

  wgpuInstanceProcessEvents__deps: ['$WG'],
  wgpuInstanceProcessEvents: function (inst) { WG.flushEvents(); },

  wgpuInstanceRelease__deps: ['$WG'],
  wgpuInstanceRelease: function (inst) { WG.drop(inst); },

  wgpuAdapterGetInfo__deps: ['$WG'],
  wgpuAdapterGetInfo: function (a, out) {
    const adapter = WG.get(a), info = adapter.info || {};
    const put = (off, s) => {
      const n = lengthBytesUTF8(s) + 1, p = _malloc(n);
      stringToUTF8(s, p, n);
      HEAPU32[(out + off) >> 2] = p;
      HEAPU32[(out + off + 4) >> 2] = n - 1;
    };
    put(4, info.vendor || '');
    put(12, info.architecture || '');
    put(20, info.device || info.description || [info.vendor, info.architecture].filter(Boolean).join(' ') || 'WebGPU adapter');
    put(28, info.description || '');
    HEAPU32[(out + 36) >> 2] = 2; // WG_BACKEND_WEBGPU: the host's, whatever it runs on
    HEAPU32[(out + 40) >> 2] = WG.isCpu(adapter, info) ? 3 : 4; // CPU, else unknown
    HEAPU32[(out + 44) >> 2] = 0;
    HEAPU32[(out + 48) >> 2] = 0;
    HEAPU32[(out + 52) >> 2] = info.subgroupMinSize || 0;
    HEAPU32[(out + 56) >> 2] = info.subgroupMaxSize || 0;
    return 1;
  },

  wgpuAdapterInfoFreeMembers: function (info) {
    [4, 12, 20, 28].forEach(function (off) { _free(HEAPU32[(info + off) >> 2]); });
  },

  wgpuAdapterGetLimits__deps: ['$WG'],
  wgpuAdapterGetLimits: function (a, out) { WG.putLimits(out, WG.get(a).limits); return 1; },

  wgpuAdapterGetFeatures__deps: ['$WG'],
  wgpuAdapterGetFeatures: function (a, out) {
    const have = [];
    WG.featureNames.forEach((name, i) => { if (name && WG.get(a).features.has(name)) have.push(i); });
    const p = _malloc(4 * have.length + 4);
    have.forEach((v, i) => { HEAPU32[(p >> 2) + i] = v; });
    HEAPU32[out >> 2] = have.length;
    HEAPU32[(out + 4) >> 2] = p;
  },

  wgpuSupportedFeaturesFreeMembers: function (f) { _free(HEAPU32[(f + 4) >> 2]); },

  wgpuAdapterRequestDevice__deps: ['$WG'],
  wgpuAdapterRequestDevice: function (a, desc, info) {
    const adapter = WG.get(a), cb = WG.cbInfo(info);
    const features = [], limits = {};
    let lost = null, uncaptured = null;
    if (desc) {
      const n = HEAPU32[(desc + 12) >> 2], fp = HEAPU32[(desc + 16) >> 2], lp = HEAPU32[(desc + 20) >> 2];
      for (let i = 0; i < n; i++) {
        const name = WG.featureNames[HEAPU32[(fp >> 2) + i]];
        if (name && adapter.features.has(name)) features.push(name);
      }
      // Every limit the adapter knows, as asked (src/webgpu asks for all of them).
      if (lp) WG.limitFields.forEach(function (f) {
        if (!(f[0] in adapter.limits)) return;
        const v = f[2] ? WG.u64(lp + f[1]) : HEAPU32[(lp + f[1]) >> 2];
        if (v) limits[f[0]] = Math.min(v, adapter.limits[f[0]]);
      });
      lost = WG.cbInfo(desc + 36);
      uncaptured = { fn: HEAPU32[(desc + 60) >> 2], u1: HEAPU32[(desc + 64) >> 2], u2: HEAPU32[(desc + 68) >> 2] };
    }
    const request = adapter.requestDevice({ requiredFeatures: features, requiredLimits: limits });
    return WG.future(request, (device, err) => {
      let id = 0;
      if (device) {
        id = WG.add(device);
        const handle = _malloc(4);
        HEAPU32[handle >> 2] = id;
        if (uncaptured && uncaptured.fn)
          device.addEventListener('uncapturederror', ev => WG.events.push(() => {
            const msg = WG.newStr(ev.error.message || String(ev.error));
            WG.call(uncaptured.fn, [handle, WG.errorType(ev.error), msg, uncaptured.u1, uncaptured.u2]);
            WG.freeStr(msg);
          }));
        if (lost && lost.fn)
          device.lost.then(info => WG.events.push(() => {
            const msg = WG.newStr(info.message || '');
            WG.call(lost.fn, [handle, info.reason === 'destroyed' ? 2 : 1, msg, lost.u1, lost.u2]);
            WG.freeStr(msg);
          }));
      }
      const msg = WG.newStr(err ? String(err && err.message || err) : '');
      WG.call(cb.fn, [device ? 1 : 3, id, msg, cb.u1, cb.u2]);
      WG.freeStr(msg);
    });
  },

  wgpuAdapterRelease__deps: ['$WG'],
  wgpuAdapterRelease: function (a) { WG.drop(a); },

  wgpuDeviceGetQueue__deps: ['$WG'],
  wgpuDeviceGetQueue: function (d) { return WG.add(WG.get(d).queue); },

  wgpuDeviceGetLimits__deps: ['$WG'],
  wgpuDeviceGetLimits: function (d, out) { WG.putLimits(out, WG.get(d).limits); return 1; },

  wgpuDeviceCreateBuffer__deps: ['$WG'],
  wgpuDeviceCreateBuffer: function (d, desc) {
    try {
      return WG.add(WG.get(d).createBuffer({
        label: WG.str(desc + 4), usage: HEAPU32[(desc + 16) >> 2], size: WG.u64(desc + 24),
        mappedAtCreation: HEAPU32[(desc + 32) >> 2] !== 0,
      }));
    } catch (e) {
      return 0; // a size over the device's limits throws (RangeError) instead of an error scope's error
    }
  },

  wgpuDeviceCreateShaderModule__deps: ['$WG'],
  wgpuDeviceCreateShaderModule: function (d, desc) {
    const source = HEAPU32[desc >> 2]; // the chained wg_wgsl_source
    return WG.add(WG.get(d).createShaderModule({ label: WG.str(desc + 4), code: WG.str(source + 8) }));
  },

  wgpuDeviceCreateComputePipeline__deps: ['$WG'],
  wgpuDeviceCreateComputePipeline: function (d, desc) {
    const layout = HEAPU32[(desc + 12) >> 2];
    return WG.add(WG.get(d).createComputePipeline({
      label: WG.str(desc + 4),
      layout: layout ? WG.get(layout) : 'auto',
      compute: { module: WG.get(HEAPU32[(desc + 20) >> 2]), entryPoint: WG.str(desc + 24) },
    }));
  },

  wgpuDeviceCreateBindGroup__deps: ['$WG'],
  wgpuDeviceCreateBindGroup: function (d, desc) {
    const n = HEAPU32[(desc + 16) >> 2], p = HEAPU32[(desc + 20) >> 2], entries = [];
    for (let i = 0; i < n; i++) {
      const e = p + 40 * i;
      entries.push({
        binding: HEAPU32[(e + 4) >> 2],
        resource: { buffer: WG.get(HEAPU32[(e + 8) >> 2]), offset: WG.u64(e + 16), size: WG.u64(e + 24) },
      });
    }
    return WG.add(WG.get(d).createBindGroup({ label: WG.str(desc + 4), layout: WG.get(HEAPU32[(desc + 12) >> 2]), entries: entries }));
  },

  wgpuDeviceCreateBindGroupLayout__deps: ['$WG'],
  wgpuDeviceCreateBindGroupLayout: function (d, desc) {
    const n = HEAPU32[(desc + 12) >> 2], p = HEAPU32[(desc + 16) >> 2], entries = [];
    for (let i = 0; i < n; i++) {
      const e = p + 112 * i;
      entries.push({
        binding: HEAPU32[(e + 4) >> 2],
        visibility: HEAPU32[(e + 8) >> 2],
        buffer: { type: HEAPU32[(e + 28) >> 2] === 4 ? 'read-only-storage' : 'storage' },
      });
    }
    return WG.add(WG.get(d).createBindGroupLayout({ entries: entries }));
  },

  wgpuDeviceCreatePipelineLayout__deps: ['$WG'],
  wgpuDeviceCreatePipelineLayout: function (d, desc) {
    const n = HEAPU32[(desc + 12) >> 2], p = HEAPU32[(desc + 16) >> 2], layouts = [];
    for (let i = 0; i < n; i++) layouts.push(WG.get(HEAPU32[(p >> 2) + i]));
    return WG.add(WG.get(d).createPipelineLayout({ bindGroupLayouts: layouts }));
  },

  wgpuDeviceCreateCommandEncoder__deps: ['$WG'],
  wgpuDeviceCreateCommandEncoder: function (d, desc) { return WG.add(WG.get(d).createCommandEncoder()); },

  wgpuDevicePushErrorScope__deps: ['$WG'],
  wgpuDevicePushErrorScope: function (d, filter) {
    WG.get(d).pushErrorScope(filter === 2 ? 'out-of-memory' : filter === 3 ? 'internal' : 'validation');
  },

  wgpuDevicePopErrorScope__deps: ['$WG'],
  wgpuDevicePopErrorScope: function (d, info) {
    const cb = WG.cbInfo(info);
    return WG.future(WG.get(d).popErrorScope(), (e, err) => {
      const msg = WG.newStr(e ? e.message : err ? String(err) : '');
      WG.call(cb.fn, [err ? 3 : 1, WG.errorType(e), msg, cb.u1, cb.u2]);
      WG.freeStr(msg);
    });
  },

  wgpuDeviceDestroy__deps: ['$WG'],
  wgpuDeviceDestroy: function (d) { WG.get(d).destroy(); },

  wgpuDeviceRelease__deps: ['$WG'],
  wgpuDeviceRelease: function (d) { WG.drop(d); },

  wgpuShaderModuleGetCompilationInfo__deps: ['$WG'],
  wgpuShaderModuleGetCompilationInfo: function (sh, info) {
    const cb = WG.cbInfo(info);
    return WG.future(WG.get(sh).getCompilationInfo(), (ci, err) => {
      const msgs = ci ? ci.messages : [];
      // wg_compilation_info {next, count, messages}, messages of 48 bytes each.
      const p = _malloc(12 + 48 * msgs.length), strs = [];
      HEAPU32[p >> 2] = 0;
      HEAPU32[(p + 4) >> 2] = msgs.length;
      HEAPU32[(p + 8) >> 2] = p + 12;
      msgs.forEach((m, i) => {
        const q = p + 12 + 48 * i, s = WG.newStr(m.message);
        strs.push(s);
        HEAPU32[q >> 2] = 0;
        HEAPU32[(q + 4) >> 2] = HEAPU32[s >> 2];
        HEAPU32[(q + 8) >> 2] = HEAPU32[(s + 4) >> 2];
        HEAPU32[(q + 12) >> 2] = m.type === 'error' ? 1 : m.type === 'warning' ? 2 : 3;
        WG.put64(q + 16, m.lineNum); WG.put64(q + 24, m.linePos);
        WG.put64(q + 32, m.offset); WG.put64(q + 40, m.length);
      });
      WG.call(cb.fn, [err ? 3 : 1, p, cb.u1, cb.u2]);
      strs.forEach(s => WG.freeStr(s));
      _free(p);
    });
  },

  wgpuShaderModuleRelease__deps: ['$WG'],
  wgpuShaderModuleRelease: function (h) { WG.drop(h); },
  wgpuComputePipelineRelease__deps: ['$WG'],
  wgpuComputePipelineRelease: function (h) { WG.drop(h); },
  wgpuBindGroupLayoutRelease__deps: ['$WG'],
  wgpuBindGroupLayoutRelease: function (h) { WG.drop(h); },
  wgpuPipelineLayoutRelease__deps: ['$WG'],
  wgpuPipelineLayoutRelease: function (h) { WG.drop(h); },
  wgpuBindGroupRelease__deps: ['$WG'],
  wgpuBindGroupRelease: function (h) { WG.drop(h); },
  wgpuCommandEncoderRelease__deps: ['$WG'],
  wgpuCommandEncoderRelease: function (h) { WG.drop(h); },
  wgpuComputePassEncoderRelease__deps: ['$WG'],
  wgpuComputePassEncoderRelease: function (h) { WG.drop(h); },
  wgpuCommandBufferRelease__deps: ['$WG'],
  wgpuCommandBufferRelease: function (h) { WG.drop(h); },
  wgpuQueueRelease__deps: ['$WG'],
  wgpuQueueRelease: function (h) { WG.drop(h); },
  wgpuBufferRelease__deps: ['$WG'],
  wgpuBufferRelease: function (h) { WG.drop(h); },
  wgpuQuerySetRelease__deps: ['$WG'],
  wgpuQuerySetRelease: function (h) { WG.drop(h); },

  wgpuCommandEncoderBeginComputePass__deps: ['$WG'],
  wgpuCommandEncoderBeginComputePass: function (enc, desc) {
    const d = {};
    const tw = desc ? HEAPU32[(desc + 12) >> 2] : 0;
    if (tw) d.timestampWrites = {
      querySet: WG.get(HEAPU32[(tw + 4) >> 2]),
      beginningOfPassWriteIndex: HEAPU32[(tw + 8) >> 2], endOfPassWriteIndex: HEAPU32[(tw + 12) >> 2],
    };
    return WG.add(WG.get(enc).beginComputePass(d));
  },

  wgpuCommandEncoderCopyBufferToBuffer__deps: ['$WG'],
  wgpuCommandEncoderCopyBufferToBuffer: function (enc, src, srcOff, dst, dstOff, size) {
    WG.get(enc).copyBufferToBuffer(WG.get(src), Number(srcOff), WG.get(dst), Number(dstOff), Number(size));
  },

  wgpuCommandEncoderFinish__deps: ['$WG'],
  wgpuCommandEncoderFinish: function (enc, desc) { return WG.add(WG.get(enc).finish()); },

  wgpuCommandEncoderResolveQuerySet__deps: ['$WG'],
  wgpuCommandEncoderResolveQuerySet: function (enc, qs, first, count, dst, off) {
    WG.get(enc).resolveQuerySet(WG.get(qs), first, count, WG.get(dst), Number(off));
  },

  wgpuComputePassEncoderSetPipeline__deps: ['$WG'],
  wgpuComputePassEncoderSetPipeline: function (pass, p) { WG.get(pass).setPipeline(WG.get(p)); },

  wgpuComputePassEncoderSetBindGroup__deps: ['$WG'],
  wgpuComputePassEncoderSetBindGroup: function (pass, index, bg, n, offsets) {
    WG.get(pass).setBindGroup(index, WG.get(bg));
  },

  wgpuComputePassEncoderDispatchWorkgroups__deps: ['$WG'],
  wgpuComputePassEncoderDispatchWorkgroups: function (pass, x, y, z) { WG.get(pass).dispatchWorkgroups(x, y, z); },

  wgpuComputePassEncoderEnd__deps: ['$WG'],
  wgpuComputePassEncoderEnd: function (pass) { WG.get(pass).end(); },

  wgpuQueueSubmit__deps: ['$WG'],
  wgpuQueueSubmit: function (q, n, bufs) {
    const list = [];
    for (let i = 0; i < n; i++) list.push(WG.get(HEAPU32[(bufs >> 2) + i]));
    WG.get(q).submit(list);
  },

  wgpuQueueWriteBuffer__deps: ['$WG'],
  wgpuQueueWriteBuffer: function (q, buf, off, data, size) {
    WG.get(q).writeBuffer(WG.get(buf), Number(off), HEAPU8, data, size);
  },

  wgpuBufferMapAsync__deps: ['$WG'],
  wgpuBufferMapAsync: function (buf, mode, off, size, info) {
    const cb = WG.cbInfo(info);
    const b = WG.get(buf);
    return WG.future(b.mapAsync(Number(mode) === 1 ? 1 : 2, off, size), (v, err) => {
      const msg = WG.newStr(err ? String(err && err.message || err) : '');
      WG.call(cb.fn, [err ? 3 : 1, msg, cb.u1, cb.u2]);
      WG.freeStr(msg);
    });
  },

  // The mapped bytes copied into the wasm memory, freed at unmap.
  wgpuBufferGetConstMappedRange__deps: ['$WG'],
  wgpuBufferGetConstMappedRange: function (buf, off, size) {
    const b = WG.get(buf);
    const bytes = new Uint8Array(b.getMappedRange(off, size));
    const p = _malloc(size || 1);
    HEAPU8.set(bytes, p);
    (b.tgCopies || (b.tgCopies = [])).push(p);
    return p;
  },

  wgpuBufferUnmap__deps: ['$WG'],
  wgpuBufferUnmap: function (buf) {
    const b = WG.get(buf);
    b.unmap();
    if (b.tgCopies) { b.tgCopies.forEach(p => _free(p)); b.tgCopies = null; }
  },

  wgpuBufferDestroy__deps: ['$WG'],
  wgpuBufferDestroy: function (buf) { WG.get(buf).destroy(); },

  wgpuDeviceCreateQuerySet__deps: ['$WG'],
  wgpuDeviceCreateQuerySet: function (d, desc) {
    try {
      return WG.add(WG.get(d).createQuerySet({ type: 'timestamp', count: HEAPU32[(desc + 16) >> 2] }));
    } catch (e) {
      return 0;
    }
  },

  wgpuQuerySetDestroy__deps: ['$WG'],
  wgpuQuerySetDestroy: function (qs) { WG.get(qs).destroy(); },
});
