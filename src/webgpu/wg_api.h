/* The part of the WebGPU C API that the runtime uses, declared here from the
 * ABI of the Dawn build we load (bun-webgpu-linux-x64 0.1.7: Dawn main of late
 * June 2025). Struct layouts follow the standard webgpu.h of 2025-06-18 except
 * the instance descriptor (Dawn's own); enum values are the 2025-06-18 ones
 * (later headers renumbered some). No header ships with the library and we
 * load it with dlopen, so these declarations are the whole contract: every
 * struct we pass or receive has its size pinned by a static assert below.
 *
 * Our names are short (wg_*) and only the members we use have meaning; the
 * rest exist to keep the layout. */
#ifndef TG_WG_API_H
#define TG_WG_API_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t wg_bool;
typedef uint64_t wg_flags;

/* Opaque handles. */
typedef struct wg_instance_t *wg_instance;
typedef struct wg_adapter_t *wg_adapter;
typedef struct wg_device_t *wg_device;
typedef struct wg_queue_t *wg_queue;
typedef struct wg_buffer_t *wg_buffer;
typedef struct wg_shader_t *wg_shader;
typedef struct wg_pipeline_t *wg_pipeline;  /* compute pipeline */
typedef struct wg_bgl_t *wg_bgl;            /* bind group layout */
typedef struct wg_bind_group_t *wg_bind_group;
typedef struct wg_encoder_t *wg_encoder;    /* command encoder */
typedef struct wg_pass_t *wg_pass;          /* compute pass encoder */
typedef struct wg_cmdbuf_t *wg_cmdbuf;
typedef struct wg_query_set_t *wg_query_set;

#define WG_STRLEN SIZE_MAX
#define WG_WHOLE_SIZE UINT64_MAX

/* ---- enum values (2025-06-18) ---- */
enum { WG_BACKEND_UNDEFINED = 0, WG_BACKEND_NULL = 1, WG_BACKEND_WEBGPU = 2, WG_BACKEND_D3D11 = 3,
       WG_BACKEND_D3D12 = 4, WG_BACKEND_METAL = 5, WG_BACKEND_VULKAN = 6, WG_BACKEND_OPENGL = 7,
       WG_BACKEND_OPENGLES = 8 };
enum { WG_ADAPTER_DISCRETE = 1, WG_ADAPTER_INTEGRATED = 2, WG_ADAPTER_CPU = 3, WG_ADAPTER_UNKNOWN = 4 };
enum { WG_CALLBACK_WAIT_ANY_ONLY = 1, WG_CALLBACK_ALLOW_PROCESS_EVENTS = 2, WG_CALLBACK_ALLOW_SPONTANEOUS = 3 };
enum { WG_FEATURE_LEVEL_CORE = 2 };
enum { WG_POWER_HIGH_PERFORMANCE = 2 };
/* Request/map/pop/compilation statuses all have Success = 1. */
enum { WG_SUCCESS = 1 };
enum { WG_WAIT_SUCCESS = 1, WG_WAIT_TIMED_OUT = 2, WG_WAIT_ERROR = 3 };
enum { WG_ERROR_FILTER_VALIDATION = 1, WG_ERROR_FILTER_OOM = 2, WG_ERROR_FILTER_INTERNAL = 3 };
enum { WG_ERROR_NONE = 1, WG_ERROR_VALIDATION = 2, WG_ERROR_OOM = 3, WG_ERROR_INTERNAL = 4, WG_ERROR_UNKNOWN = 5 };
enum { WG_MESSAGE_ERROR = 1, WG_MESSAGE_WARNING = 2, WG_MESSAGE_INFO = 3 };
enum { WG_LOST_UNKNOWN = 1, WG_LOST_DESTROYED = 2, WG_LOST_CANCELLED = 3, WG_LOST_FAILED_CREATION = 4 };
enum { WG_STYPE_SHADER_SOURCE_WGSL = 2, WG_STYPE_DAWN_TOGGLES = 0x0005000A };
/* Feature names of webgpu.h 2025-06-18 (Dawn's own start at 0x50000). */
enum { WG_FEATURE_TIMESTAMP_QUERY = 0x3, WG_FEATURE_SHADER_F16 = 0xA, WG_FEATURE_SUBGROUPS = 0x11 };
enum { WG_QUERY_TIMESTAMP = 2 };

#define WG_USAGE_MAP_READ ((wg_flags)0x1)
#define WG_USAGE_COPY_SRC ((wg_flags)0x4)
#define WG_USAGE_COPY_DST ((wg_flags)0x8)
#define WG_USAGE_STORAGE ((wg_flags)0x80)
#define WG_USAGE_QUERY_RESOLVE ((wg_flags)0x200)
#define WG_MAP_READ ((wg_flags)0x1)

/* ---- structs ---- */
typedef struct {
    const char *data;
    size_t length; /* WG_STRLEN: NUL-terminated */
} wg_str;

typedef struct wg_chain {
    struct wg_chain *next;
    uint32_t stype;
} wg_chain;

typedef struct {
    uint64_t id;
} wg_future;

typedef struct {
    wg_future future;
    wg_bool completed;
} wg_future_wait;

/* Dawn's instance descriptor: capabilities inline instead of the standard
 * feature list. Enabling timed waits lets wgpuInstanceWaitAny block. */
typedef struct {
    wg_chain *next;
    struct {
        wg_chain *next;
        wg_bool timed_wait_any_enable;
        size_t timed_wait_any_max_count;
    } caps;
} wg_instance_desc;

typedef struct {
    wg_chain *next;
    uint32_t feature_level;
    uint32_t power_preference;
    wg_bool force_fallback_adapter;
    uint32_t backend_type;
    void *compatible_surface;
} wg_adapter_options;

typedef struct {
    wg_chain *next;
    wg_str vendor, architecture, device, description;
    uint32_t backend_type, adapter_type;
    uint32_t vendor_id, device_id;
    uint32_t subgroup_min_size, subgroup_max_size;
} wg_adapter_info;

typedef struct {
    wg_chain *next;
    uint32_t max_texture_dimension_1d, max_texture_dimension_2d, max_texture_dimension_3d, max_texture_array_layers;
    uint32_t max_bind_groups, max_bind_groups_plus_vertex_buffers, max_bindings_per_bind_group;
    uint32_t max_dynamic_uniform_buffers_per_pipeline_layout, max_dynamic_storage_buffers_per_pipeline_layout;
    uint32_t max_sampled_textures_per_shader_stage, max_samplers_per_shader_stage;
    uint32_t max_storage_buffers_per_shader_stage, max_storage_textures_per_shader_stage;
    uint32_t max_uniform_buffers_per_shader_stage;
    uint64_t max_uniform_buffer_binding_size, max_storage_buffer_binding_size;
    uint32_t min_uniform_buffer_offset_alignment, min_storage_buffer_offset_alignment;
    uint32_t max_vertex_buffers;
    uint64_t max_buffer_size;
    uint32_t max_vertex_attributes, max_vertex_buffer_array_stride, max_inter_stage_shader_variables;
    uint32_t max_color_attachments, max_color_attachment_bytes_per_sample;
    uint32_t max_compute_workgroup_storage_size, max_compute_invocations_per_workgroup;
    uint32_t max_compute_workgroup_size_x, max_compute_workgroup_size_y, max_compute_workgroup_size_z;
    uint32_t max_compute_workgroups_per_dimension;
    uint32_t max_immediate_size;
} wg_limits;

/* Dawn's toggles descriptor (WGPUDawnTogglesDescriptor), chained to an
 * instance, adapter-options or device descriptor. */
typedef struct {
    wg_chain chain; /* stype WG_STYPE_DAWN_TOGGLES */
    size_t enabled_count;
    const char *const *enabled;
    size_t disabled_count;
    const char *const *disabled;
} wg_toggles;

typedef struct {
    size_t count;
    const uint32_t *features;
} wg_features; /* WGPUSupportedFeatures */

/* Callbacks: (status, payload..., userdata1, userdata2). */
typedef void (*wg_adapter_cb)(uint32_t status, wg_adapter adapter, wg_str message, void *u1, void *u2);
typedef void (*wg_device_cb)(uint32_t status, wg_device device, wg_str message, void *u1, void *u2);
typedef void (*wg_lost_cb)(const wg_device *device, uint32_t reason, wg_str message, void *u1, void *u2);
typedef void (*wg_error_cb)(const wg_device *device, uint32_t type, wg_str message, void *u1, void *u2);
typedef void (*wg_pop_cb)(uint32_t status, uint32_t type, wg_str message, void *u1, void *u2);
typedef void (*wg_map_cb)(uint32_t status, wg_str message, void *u1, void *u2);
struct wg_compilation_info;
typedef void (*wg_compile_cb)(uint32_t status, const struct wg_compilation_info *info, void *u1, void *u2);
typedef void (*wg_pipeline_cb)(uint32_t status, wg_pipeline pipeline, wg_str message, void *u1, void *u2);

/* The callback-info structs share one shape: chain, mode, callback, two user pointers. */
#define WG_CALLBACK_INFO(name, fn_type) \
    typedef struct {                    \
        wg_chain *next;                 \
        uint32_t mode;                  \
        fn_type callback;               \
        void *u1, *u2;                  \
    } name
WG_CALLBACK_INFO(wg_adapter_cb_info, wg_adapter_cb);
WG_CALLBACK_INFO(wg_device_cb_info, wg_device_cb);
WG_CALLBACK_INFO(wg_lost_cb_info, wg_lost_cb);
WG_CALLBACK_INFO(wg_pop_cb_info, wg_pop_cb);
WG_CALLBACK_INFO(wg_map_cb_info, wg_map_cb);
WG_CALLBACK_INFO(wg_compile_cb_info, wg_compile_cb);
WG_CALLBACK_INFO(wg_pipeline_cb_info, wg_pipeline_cb);
/* The uncaptured-error callback has no mode: it may fire on any thread. */
typedef struct {
    wg_chain *next;
    wg_error_cb callback;
    void *u1, *u2;
} wg_error_cb_info;

typedef struct {
    wg_chain *next;
    wg_str label;
} wg_label_desc; /* queue, command encoder, command buffer, compute pass (+ timestamp writes) */

typedef struct {
    wg_chain *next;
    wg_str label;
    size_t required_feature_count;
    const uint32_t *required_features;
    const wg_limits *required_limits;
    wg_label_desc default_queue;
    wg_lost_cb_info lost;
    wg_error_cb_info uncaptured;
} wg_device_desc;

typedef struct {
    wg_chain *next;
    wg_str label;
    wg_flags usage;
    uint64_t size;
    wg_bool mapped_at_creation;
} wg_buffer_desc;

typedef struct {
    wg_chain chain; /* stype WG_STYPE_SHADER_SOURCE_WGSL */
    wg_str code;
} wg_wgsl_source;

typedef struct {
    wg_chain *next; /* -> wg_wgsl_source.chain */
    wg_str label;
} wg_shader_desc;

typedef struct wg_compilation_message {
    wg_chain *next;
    wg_str message;
    uint32_t type;
    uint64_t line_num, line_pos, offset, length;
} wg_compilation_message;

typedef struct wg_compilation_info {
    wg_chain *next;
    size_t message_count;
    const wg_compilation_message *messages;
} wg_compilation_info;

typedef struct {
    wg_chain *next;
    wg_str label;
    void *layout; /* a wg_layout */
    struct {
        wg_chain *next;
        wg_shader module;
        wg_str entry_point;
        size_t constant_count;
        const void *constants;
    } compute;
} wg_pipeline_desc;

typedef struct {
    wg_chain *next;
    uint32_t binding;
    wg_buffer buffer;
    uint64_t offset, size;
    void *sampler, *texture_view;
} wg_bind_entry;

typedef struct {
    wg_chain *next;
    wg_str label;
    wg_bgl layout;
    size_t entry_count;
    const wg_bind_entry *entries;
} wg_bind_group_desc;

/* Where a pass writes the GPU's clock (in ns) as it begins and ends. */
typedef struct {
    wg_chain *next;
    wg_query_set set;
    uint32_t begin_index, end_index;
} wg_pass_timestamps;

typedef struct {
    wg_chain *next;
    wg_str label;
    const wg_pass_timestamps *timestamp_writes;
} wg_pass_desc;

typedef struct {
    wg_chain *next;
    wg_str label;
    uint32_t type; /* WG_QUERY_TIMESTAMP */
    uint32_t count;
} wg_query_set_desc;

/* A bind group layout entry; only the buffer part is used (the sampler and
 * texture parts stay zero = "binding not used"). */
typedef struct {
    wg_chain *next;
    uint32_t binding;
    wg_flags visibility;
    uint32_t binding_array_size;
    struct {
        wg_chain *next;
        uint32_t type;
        wg_bool has_dynamic_offset;
        uint64_t min_binding_size;
    } buffer;
    uint8_t sampler_texture_storage_texture[64];
} wg_bgl_entry;

typedef struct {
    wg_chain *next;
    wg_str label;
    size_t entry_count;
    const wg_bgl_entry *entries;
} wg_bgl_desc;

typedef struct {
    wg_chain *next;
    wg_str label;
    size_t bgl_count;
    const wg_bgl *bgls;
    uint32_t immediate_size;
} wg_layout_desc;

typedef struct wg_layout_t *wg_layout; /* pipeline layout */
#define WG_STAGE_COMPUTE ((wg_flags)0x4)
enum { WG_BINDING_STORAGE = 3, WG_BINDING_READ_ONLY_STORAGE = 4 };

/* The sizes of the structs above. 64-bit (LP64): as webgpu.h lays them out
 * for the Dawn we load. wasm32 (the WebAssembly build): the layout
 * web/src/webgpu_host.js reads and writes, which implements these functions
 * over the host's JavaScript WebGPU; the offsets it uses are pinned too. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(wg_str) == 16, "WGPUStringView");
_Static_assert(sizeof(wg_chain) == 16, "WGPUChainedStruct");
_Static_assert(sizeof(wg_future_wait) == 16, "WGPUFutureWaitInfo");
_Static_assert(sizeof(wg_instance_desc) == 32, "Dawn WGPUInstanceDescriptor");
_Static_assert(sizeof(wg_adapter_options) == 32, "WGPURequestAdapterOptions");
_Static_assert(sizeof(wg_adapter_info) == 96, "WGPUAdapterInfo");
_Static_assert(sizeof(wg_limits) == 152, "WGPULimits");
_Static_assert(sizeof(wg_toggles) == 48, "WGPUDawnTogglesDescriptor");
_Static_assert(sizeof(wg_features) == 16, "WGPUSupportedFeatures");
_Static_assert(sizeof(wg_adapter_cb_info) == 40, "WGPU*CallbackInfo");
_Static_assert(sizeof(wg_error_cb_info) == 32, "WGPUUncapturedErrorCallbackInfo");
_Static_assert(sizeof(wg_label_desc) == 24, "WGPUQueueDescriptor");
_Static_assert(sizeof(wg_device_desc) == 144, "WGPUDeviceDescriptor");
_Static_assert(sizeof(wg_buffer_desc) == 48, "WGPUBufferDescriptor");
_Static_assert(sizeof(wg_wgsl_source) == 32, "WGPUShaderSourceWGSL");
_Static_assert(sizeof(wg_shader_desc) == 24, "WGPUShaderModuleDescriptor");
_Static_assert(sizeof(wg_compilation_message) == 64, "WGPUCompilationMessage");
_Static_assert(sizeof(wg_compilation_info) == 24, "WGPUCompilationInfo");
_Static_assert(sizeof(wg_pipeline_desc) == 80, "WGPUComputePipelineDescriptor");
_Static_assert(sizeof(wg_bind_entry) == 56, "WGPUBindGroupEntry");
_Static_assert(sizeof(wg_bind_group_desc) == 48, "WGPUBindGroupDescriptor");
_Static_assert(sizeof(wg_pass_desc) == 32, "WGPUComputePassDescriptor");
_Static_assert(sizeof(wg_pass_timestamps) == 24, "WGPUPassTimestampWrites");
_Static_assert(sizeof(wg_query_set_desc) == 32, "WGPUQuerySetDescriptor");
_Static_assert(sizeof(wg_bgl_entry) == 120 && offsetof(wg_bgl_entry, buffer) == 32, "WGPUBindGroupLayoutEntry");
_Static_assert(sizeof(wg_bgl_desc) == 40, "WGPUBindGroupLayoutDescriptor");
_Static_assert(sizeof(wg_layout_desc) == 48, "WGPUPipelineLayoutDescriptor");
#elif defined(__wasm32__)
_Static_assert(sizeof(wg_str) == 8 && sizeof(wg_chain) == 8, "wg_str, wg_chain");
_Static_assert(sizeof(wg_future_wait) == 16 && offsetof(wg_future_wait, completed) == 8, "wg_future_wait");
_Static_assert(sizeof(wg_instance_desc) == 16 && sizeof(wg_adapter_options) == 24, "instance, adapter options");
_Static_assert(sizeof(wg_adapter_info) == 60 && offsetof(wg_adapter_info, backend_type) == 36, "wg_adapter_info");
_Static_assert(sizeof(wg_limits) == 152 && offsetof(wg_limits, max_uniform_buffer_binding_size) == 64 &&
               offsetof(wg_limits, max_buffer_size) == 96 && offsetof(wg_limits, max_immediate_size) == 148,
               "wg_limits");
_Static_assert(sizeof(wg_toggles) == 24 && sizeof(wg_features) == 8, "wg_toggles, wg_features");
_Static_assert(sizeof(wg_adapter_cb_info) == 20 && sizeof(wg_error_cb_info) == 16, "callback infos");
_Static_assert(sizeof(wg_label_desc) == 12, "wg_label_desc");
_Static_assert(sizeof(wg_device_desc) == 72 && offsetof(wg_device_desc, required_feature_count) == 12 &&
               offsetof(wg_device_desc, lost) == 36 && offsetof(wg_device_desc, uncaptured) == 56,
               "wg_device_desc");
_Static_assert(sizeof(wg_buffer_desc) == 40 && offsetof(wg_buffer_desc, usage) == 16 &&
               offsetof(wg_buffer_desc, size) == 24 && offsetof(wg_buffer_desc, mapped_at_creation) == 32,
               "wg_buffer_desc");
_Static_assert(sizeof(wg_wgsl_source) == 16 && sizeof(wg_shader_desc) == 12, "shader source");
_Static_assert(sizeof(wg_compilation_message) == 48 && offsetof(wg_compilation_message, line_num) == 16,
               "wg_compilation_message");
_Static_assert(sizeof(wg_compilation_info) == 12, "wg_compilation_info");
_Static_assert(sizeof(wg_pipeline_desc) == 40 && offsetof(wg_pipeline_desc, layout) == 12 &&
               offsetof(wg_pipeline_desc, compute) == 16, "wg_pipeline_desc");
_Static_assert(sizeof(wg_bind_entry) == 40 && offsetof(wg_bind_entry, buffer) == 8 &&
               offsetof(wg_bind_entry, offset) == 16 && offsetof(wg_bind_entry, size) == 24, "wg_bind_entry");
_Static_assert(sizeof(wg_bind_group_desc) == 24 && sizeof(wg_pass_desc) == 16, "bind group, pass");
_Static_assert(sizeof(wg_pass_timestamps) == 16 && sizeof(wg_query_set_desc) == 20, "timestamps, query set");
_Static_assert(sizeof(wg_bgl_entry) == 112 && offsetof(wg_bgl_entry, buffer) == 24, "wg_bgl_entry");
_Static_assert(sizeof(wg_bgl_desc) == 20 && sizeof(wg_layout_desc) == 24, "layouts");
#else
#error "wg_api.h: the struct layouts are known for 64-bit targets and wasm32 only"
#endif

/* ---- the functions, resolved with dlsym into this table ---- */
#define WG_FUNCTIONS(X)                                                                                            \
    X(wg_instance, CreateInstance, (const wg_instance_desc *))                                                     \
    X(wg_future, InstanceRequestAdapter, (wg_instance, const wg_adapter_options *, wg_adapter_cb_info))           \
    X(uint32_t, InstanceWaitAny, (wg_instance, size_t, wg_future_wait *, uint64_t))                               \
    X(void, InstanceProcessEvents, (wg_instance))                                                                 \
    X(void, InstanceRelease, (wg_instance))                                                                       \
    X(uint32_t, AdapterGetInfo, (wg_adapter, wg_adapter_info *))                                                  \
    X(void, AdapterInfoFreeMembers, (wg_adapter_info))                                                           \
    X(uint32_t, AdapterGetLimits, (wg_adapter, wg_limits *))                                                      \
    X(void, AdapterGetFeatures, (wg_adapter, wg_features *))                                                      \
    X(void, SupportedFeaturesFreeMembers, (wg_features))                                                          \
    X(wg_future, AdapterRequestDevice, (wg_adapter, const wg_device_desc *, wg_device_cb_info))                   \
    X(void, AdapterRelease, (wg_adapter))                                                                         \
    X(wg_queue, DeviceGetQueue, (wg_device))                                                                      \
    X(uint32_t, DeviceGetLimits, (wg_device, wg_limits *))                                                        \
    X(wg_buffer, DeviceCreateBuffer, (wg_device, const wg_buffer_desc *))                                         \
    X(wg_shader, DeviceCreateShaderModule, (wg_device, const wg_shader_desc *))                                   \
    X(wg_pipeline, DeviceCreateComputePipeline, (wg_device, const wg_pipeline_desc *))                            \
    X(wg_bind_group, DeviceCreateBindGroup, (wg_device, const wg_bind_group_desc *))                              \
    X(wg_encoder, DeviceCreateCommandEncoder, (wg_device, const wg_label_desc *))                                 \
    X(void, DevicePushErrorScope, (wg_device, uint32_t))                                                          \
    X(wg_future, DevicePopErrorScope, (wg_device, wg_pop_cb_info))                                                \
    X(void, DeviceDestroy, (wg_device))                                                                           \
    X(void, DeviceRelease, (wg_device))                                                                           \
    X(wg_future, ShaderModuleGetCompilationInfo, (wg_shader, wg_compile_cb_info))                                 \
    X(void, ShaderModuleRelease, (wg_shader))                                                                     \
    X(void, ComputePipelineRelease, (wg_pipeline))                                                                \
    X(void, BindGroupLayoutRelease, (wg_bgl))                                                                     \
    X(wg_bgl, DeviceCreateBindGroupLayout, (wg_device, const wg_bgl_desc *))                                      \
    X(wg_layout, DeviceCreatePipelineLayout, (wg_device, const wg_layout_desc *))                                 \
    X(void, PipelineLayoutRelease, (wg_layout))                                                                   \
    X(void, BindGroupRelease, (wg_bind_group))                                                                    \
    X(wg_pass, CommandEncoderBeginComputePass, (wg_encoder, const wg_pass_desc *))                                \
    X(void, CommandEncoderCopyBufferToBuffer, (wg_encoder, wg_buffer, uint64_t, wg_buffer, uint64_t, uint64_t))   \
    X(wg_cmdbuf, CommandEncoderFinish, (wg_encoder, const wg_label_desc *))                                       \
    X(void, CommandEncoderRelease, (wg_encoder))                                                                  \
    X(void, ComputePassEncoderSetPipeline, (wg_pass, wg_pipeline))                                                \
    X(void, ComputePassEncoderSetBindGroup, (wg_pass, uint32_t, wg_bind_group, size_t, const uint32_t *))         \
    X(void, ComputePassEncoderDispatchWorkgroups, (wg_pass, uint32_t, uint32_t, uint32_t))                        \
    X(void, ComputePassEncoderEnd, (wg_pass))                                                                     \
    X(void, ComputePassEncoderRelease, (wg_pass))                                                                 \
    X(void, CommandBufferRelease, (wg_cmdbuf))                                                                    \
    X(void, QueueSubmit, (wg_queue, size_t, const wg_cmdbuf *))                                                   \
    X(void, QueueWriteBuffer, (wg_queue, wg_buffer, uint64_t, const void *, size_t))                              \
    X(void, QueueRelease, (wg_queue))                                                                             \
    X(wg_future, BufferMapAsync, (wg_buffer, wg_flags, size_t, size_t, wg_map_cb_info))                           \
    X(const void *, BufferGetConstMappedRange, (wg_buffer, size_t, size_t))                                       \
    X(void, BufferUnmap, (wg_buffer))                                                                             \
    X(void, BufferDestroy, (wg_buffer))                                                                           \
    X(void, BufferRelease, (wg_buffer))                                                                           \
    X(wg_query_set, DeviceCreateQuerySet, (wg_device, const wg_query_set_desc *))                                 \
    X(void, CommandEncoderResolveQuerySet, (wg_encoder, wg_query_set, uint32_t, uint32_t, wg_buffer, uint64_t))   \
    X(void, QuerySetDestroy, (wg_query_set))                                                                      \
    X(void, QuerySetRelease, (wg_query_set))

typedef struct {
#define WG_MEMBER(ret, name, args) ret(*name) args;
    WG_FUNCTIONS(WG_MEMBER)
#undef WG_MEMBER
} wg_api;

#endif
