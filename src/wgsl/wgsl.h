/* WGSL code generation: one compute kernel per node, with every shape,
 * stride, offset and scalar baked in as a literal.
 *
 * Binding design. Each operand (the output and every input) is bound as a
 * range (arena buffer, offset, size) of its arena, so identical ops at
 * different places in a model produce identical source (one pipeline) and
 * each binding is bounded by the tensor, not the arena: the device's
 * maxStorageBufferBindingSize then limits a tensor, which is checked here
 * and named in the error. The planner puts an in-place output on its input's
 * bytes and a view on its source's, and WebGPU forbids a dispatch from
 * binding overlapping ranges of one buffer when either is writable; so
 * operands whose ranges overlap share one binding (their union), each read at
 * its own element offset. Every binding is declared read_write: a buffer
 * bound both read-only and writable in one dispatch is a usage conflict even
 * when the ranges are apart, and all three arenas are read and written by
 * nearly every kernel. Elements are stored as u32 and bitcast by typed
 * accessors (ld0..ld3 for the inputs, st for the output), which also keeps
 * bool as u32 0/1 and lets one binding hold operands of different dtypes. */
#ifndef TG_WGSL_H
#define TG_WGSL_H

#include "../ir/ir.h"
#include "../plan/plan.h"

/* The device limits the generated kernels must respect. */
typedef struct {
    uint64_t max_storage_buffer_binding_size;
    uint64_t max_buffer_size;
    uint32_t max_storage_buffers_per_stage;
    uint32_t max_workgroup_storage_size;
    uint32_t max_invocations_per_workgroup;
    uint32_t max_workgroups_per_dimension;
    uint32_t min_storage_buffer_offset_alignment;
} tg_wgsl_limits;

#define TG_WGSL_MAX_BINDINGS (TG_MAX_IN + 1)

typedef struct {
    int arena;
    int64_t offset, size; /* bytes */
} tg_wgsl_binding;

typedef struct {
    int node;
    char *source;            /* NULL: no kernel (a view, a leaf, or an upload) */
    int n_bindings;
    tg_wgsl_binding bind[TG_WGSL_MAX_BINDINGS]; /* @binding(i) of group 0, in order */
    int64_t threads;         /* work items (elements, rows or tiles x threads) */
    uint32_t workgroup_size; /* invocations per workgroup */
    uint32_t dispatch[3];    /* workgroups in x, y, z */
    const void *upload;      /* a literal constant: bytes written at compile instead */
    int64_t upload_bytes;
} tg_kernel_spec;

/* Builds the kernel for node `id` of a planned graph. Leaves and views get
 * source NULL. A size over a limit is TG_ERR_LIMIT naming the node (id, op,
 * shape). */
tg_status tg_wgsl_emit(const tg_graph *g, const tg_plan *plan, int id, const tg_wgsl_limits *lim,
                       tg_kernel_spec *out);
/* An end-of-step writeback (src's value into dst's memory) as a copy kernel.
 * A kernel rather than copyBufferToBuffer: WebGPU cannot copy between two
 * ranges of one buffer, and a writeback's source and destination often share
 * the persistent arena; as a kernel it also stays in the step's one pass. */
tg_status tg_wgsl_emit_writeback(const tg_graph *g, const tg_plan *plan, int src, int dst, const tg_wgsl_limits *lim,
                                 tg_kernel_spec *out);
void tg_kernel_spec_free(tg_kernel_spec *k);
/* Checks every arena against max_buffer_size, naming the first tensor that
 * lies past the limit. */
tg_status tg_wgsl_check_arenas(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim);

/* WGSL versions of the PRNG in util.h (the integer ones bit for bit):
 *   fn tg_hash32(x: u32) -> u32
 *   fn tg_rng_key(seed_lo: u32, seed_hi: u32, salt: u32) -> u32
 *   fn tg_rng_key_u32(key: u32, index: u32) -> u32
 *   fn tg_rng_key_uniform(key: u32, index: u32) -> f32
 *   fn tg_rng_key_normal(key: u32, index: u32) -> f32
 *   fn tg_rng_u32(seed_lo: u32, seed_hi: u32, salt: u32, index: u32) -> u32 */
extern const char tg_wgsl_prng[];

#endif
