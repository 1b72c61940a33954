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
#include "../optim/optim.h"

/* The device limits the generated kernels must respect. */
typedef struct {
    uint64_t max_storage_buffer_binding_size;
    uint64_t max_buffer_size;
    uint32_t max_storage_buffers_per_stage;
    uint32_t max_workgroup_storage_size;
    uint32_t max_invocations_per_workgroup;
    uint32_t max_workgroups_per_dimension;
    uint32_t min_storage_buffer_offset_alignment;
    /* Not a device limit: one kernel per node, so every node's value can be
     * read after its own kernel (the engine sets it for check_numerics). */
    bool one_kernel_per_node;
    /* Not a limit: a CPU adapter (lavapipe), whose shader compiler takes
     * seconds on long straight-line code (the fused attention then walks
     * its register rows with loops instead of unrolling them). */
    bool cpu_adapter;
    /* The smallest subgroup the device may run, when it was created with
     * the subgroups feature; 0: no subgroups (kernels use workgroup trees). */
    uint32_t subgroup_min_size;
    /* The largest (0 without subgroups): equal to the smallest on devices
     * whose subgroups have one size (NVIDIA's 32, lavapipe's 8), where a
     * row kernel may give each row one subgroup (rows.c). */
    uint32_t subgroup_max_size;
    /* Not a limit: the optimizer's fused updates do nothing when node
     * step_check's value (the training step's check) is not finite, and
     * their specs say so (tg_kernel_spec.gated), so that the engine may
     * submit them without waiting for the check. */
    bool gate_updates;
    int step_check;
} tg_wgsl_limits;

/* Bindings a kernel may have (a fused kernel reads more than one node's
 * inputs); the device's maxStorageBuffersPerShaderStage may allow fewer. */
#define TG_WGSL_MAX_BINDINGS 10

typedef struct {
    int arena;
    int64_t offset, size; /* bytes */
} tg_wgsl_binding;

typedef struct {
    int node;
    char *source;            /* NULL: no kernel (a view, a leaf, or an upload) */
    int n_bindings;
    tg_wgsl_binding bind[TG_WGSL_MAX_BINDINGS]; /* @binding(i) of group 0, in order */
    unsigned read_only;      /* bit b: binding b is var<storage, read> (tg_wk_declare) */
    int64_t threads;         /* work items (elements, rows or tiles x threads) */
    uint32_t workgroup_size; /* invocations per workgroup */
    uint32_t dispatch[3];    /* workgroups in x, y, z */
    const void *upload;      /* a literal constant: bytes written at compile instead */
    int64_t upload_bytes;
    int64_t workspace;       /* bytes of the program's workspace it binds (0: none) */
    bool attention_work;     /* it binds the attention statistics (the workspace's first part), not the
                              * scratch the other kernels share after them */
    bool gated;              /* it does nothing when the step check is not finite (tg_wgsl_limits.gate_updates) */
    /* For TG_WG_PROFILE: a product kernel's M, N and K of one of its
     * products (a split product's phase 2 too, whose flops are 0), and the
     * useful work: 2 M N K times the products it computes (batch, members,
     * terms); an attention kernel's products over the causal pairs. */
    int64_t mm_mnk[3];
    double flops; /* a double: no overflow whatever the sizes */
} tg_kernel_spec;

/* Builds the kernel for node `id` of a planned graph. Leaves and views get
 * source NULL. A size over a limit is TG_ERR_LIMIT naming the node (id, op,
 * shape). */
tg_status tg_wgsl_emit(const tg_graph *g, const tg_plan *plan, int id, const tg_wgsl_limits *lim,
                       tg_kernel_spec *out);
/* A fused kernel (chosen before planning, prefuse.c): node `kernel`'s
 * emitter writes the entry point; the nodes in inl (topological order:
 * inputs before readers) are computed inline wherever a member reads them,
 * never stored; the chain epi (each reading the one before, or the kernel
 * node, at the element being stored) transforms every value the kernel
 * stores, and its last node is what lands in memory instead.
 * A sibling (sib > 0) is a second node the kernel's emitter computes from
 * the kernel node's own inputs and stores through st2 (a layer norm's bias
 * gradient beside its gain gradient, a bias gradient beside a split
 * weight gradient); 0 is none,
 * as node 0 is always a leaf. A second sibling (sib2 > 0, beside a
 * sibling only) is stored through st3: the fused norm backward's bias
 * gradient (norm_bwd.c), whose sibling is the gain gradient. */
typedef struct {
    int kernel;
    int *inl, n_inl;
    int *epi, n_epi;
    int sib, sib2;
} tg_wgsl_fused;
tg_status tg_wgsl_emit_fused(const tg_graph *g, const tg_plan *plan, const tg_wgsl_fused *f, const tg_wgsl_limits *lim,
                             tg_kernel_spec *out);
/* A kernel that runs as two dispatches (phase 1 then 2) sharing `work_bytes`
 * of the program's workspace: a matmul with its K split into ranges, or a
 * tall column sum with its rows split (tg_wgsl_phases asks both).
 * tg_wgsl_matmul_split says how many ranges node id's matmul takes (1: one
 * kernel) and the workspace they need. */
int tg_wgsl_matmul_split(const tg_graph *g, int id, int64_t *work_bytes);
/* Tests: every matmul compiled from now on uses tile configuration cfg (0
 * 128x128, 1 128x64, 2 64x64; -1 chooses by shape again), with split > 0
 * that many K-ranges, and its k-slices written out step by step (unroll 1,
 * what a GPU gets), as a loop (0, what a CPU adapter gets) or by adapter (-1). */
void tg_wgsl_matmul_test_config(int cfg, int split, int unroll);
/* Tests: every matmul compiled from now on places a warp's invocations as
 * 16 x 2 register blocks (0) or 8 x 4 (1); -1 chooses by K again. */
void tg_wgsl_matmul_test_warps(int form);
/* Tests: a product with an epilogue takes all its epilogue values before
 * storing (1, as TG_WGSL_MM_EPI=early) or stores each in turn (0); -1 goes
 * back to TG_WGSL_MM_EPI. */
void tg_wgsl_matmul_test_epilogue(int early);
/* Tests: products compiled from now on store their results 4 columns at a
 * time wherever they can (1, as TG_WGSL_MM_ST4=all) or one element at a
 * time (0, as =0); -1 goes back to TG_WGSL_MM_ST4 and the measured rule. */
void tg_wgsl_matmul_test_st4(int mode);
/* Tests: products compiled from now on load their operands 4 elements at a
 * time wherever they can (1, as TG_WGSL_MM_LD4=all) or one at a time (0,
 * as =0); -1 goes back to TG_WGSL_MM_LD4 and the measured rule. */
void tg_wgsl_matmul_test_ld4(int mode);
/* Tests: products compiled from now on may lead a group of products of
 * one other A (1, as TG_WGSL_MM_GROUP=lead) or not (0, as =shared); -1
 * goes back to TG_WGSL_MM_GROUP, by default every product. */
void tg_wgsl_matmul_test_groups(int lead);
tg_status tg_wgsl_emit_phase(const tg_graph *g, const tg_plan *plan, const tg_wgsl_fused *f, int phase, int64_t work_bytes,
                             const tg_wgsl_limits *lim, tg_kernel_spec *out);
/* How many dispatches node id's kernel takes on a device of these limits:
 * 1, or 2 (phase 1 then 2, sharing work_bytes of the workspace): a matmul
 * whose K is split (tg_wgsl_matmul_split), a tall column sum whose rows
 * are (rows.c), an embedding gradient over row chunks (ops_nn.c). */
int tg_wgsl_phases(const tg_graph *g, int id, const tg_wgsl_limits *lim, int64_t *work_bytes);
/* How many dispatches fused kernel f takes (tg_wgsl_phases of its kernel
 * node, or of the fused norm backward, norm_bwd.c) and the workspace they
 * share, its siblings' partial sums included. */
int tg_wgsl_fused_phases(const tg_graph *g, const tg_wgsl_fused *f, const tg_wgsl_limits *lim, int64_t *work_bytes);
/* Tests: a norm's backward planned from now on runs as norm_dx's kernel
 * summing the gain's (and bias's) columns too (on 1, as
 * the default) or as its own kernels (0, as TG_WGSL_NORM_BWD=0), with chunks > 0 that
 * many chunks of rows (as TG_WGSL_NORM_BWD=N; at most the rows), 0 by
 * shape; on -1 goes back to TG_WGSL_NORM_BWD. */
void tg_wgsl_norm_bwd_test(int on, int chunks);
/* Tests: every embedding gradient compiled from now on takes the column-sum
 * form (0), the warps form over at most `chunks` row chunks (> 0; fewer
 * where the rows make fewer), or chooses by shape again (-1). */
void tg_wgsl_embedding_grad_test(int chunks);
/* Tests: every column sum compiled from now on splits its rows into s chunks
 * (s > 0, at any size), never splits (0), or chooses by shape and
 * TG_WGSL_COLSUM again (-1). */
void tg_wgsl_colsum_test_split(int s);
/* Tests: every column sum compiled from now on gives each workgroup cw
 * columns (8, 32, 64 or 128), or chooses by shape and TG_WGSL_COLSUM_WIDTH
 * again (-1). */
void tg_wgsl_colsum_test_width(int cw);
/* Tests: row kernels compiled from now on walk long rows with loops (0) or,
 * where they fit, in registers (1); -1 goes back to TG_WGSL_ROWS. */
void tg_wgsl_rows_test_form(int form);
/* Tests: row kernels compiled from now on combine their rows with
 * workgroup trees (0) or, on a device with subgroups, subgroup sums in a
 * workgroup per row (1) or a row per subgroup where one fits (2); -1 goes
 * back to TG_WGSL_REDUCE. */
void tg_wgsl_reduce_test_form(int form);
/* Tests: a layer norm's forward compiled from now on takes a workgroup per
 * row (0) or, where the reduction allows one, a row per subgroup (1); -1
 * goes back to TG_WGSL_LN. */
void tg_wgsl_norm_test_form(int form);
/* Tests: a long row's workgroup grows up to wg invocations (a power of two
 * from 32 to 1024) instead of 64, and a workgroup of rows a subgroup each
 * has wg invocations; 0 goes back to TG_WGSL_ROW_WG and TG_WGSL_SG_ROWS_WG. */
void tg_wgsl_rows_test_wg(uint32_t wg);
/* A whole program's kernels, in the order a step runs them (constants
 * included: the engine runs those once), with the planner's fusions. */
typedef struct {
    tg_kernel_spec *k;
    int n;
    int n_groups;           /* fused groups planned */
    int64_t workspace_bytes; /* scratch the kernels share outside the plan (binding arena TG_WGSL_WORKSPACE) */
    int64_t scratch_bytes;   /* the scratch arena the kernels bind: the plan's, or more where the partial
                              * sums of split kernels found no room free over their turns */
} tg_wgsl_program;
#define TG_WGSL_WORKSPACE TG_N_ARENAS /* tg_wgsl_binding.arena of the engine's per-program workspace buffer */
/* The fusion pass before planning (prefuse.c): causal attentions, then
 * products with an epilogue, siblings, sums and groups of products, then
 * elementwise chains (inline producers, epilogues); pinned: nodes read
 * from outside, never absorbed; cut: the end of the backward, which no
 * elementwise group spans. *out = NULL when there are no groups;
 * (*out)->impl is a tg_wgsl_prefused (attention.h), the attentions being
 * the first groups. */
tg_status tg_wgsl_fuse(const tg_graph *g, const bool *pinned, int cut, const tg_wgsl_limits *lim, tg_fusion **out);
/* fu: the groups chosen before planning (tg_wgsl_fuse), NULL for none. */
tg_status tg_wgsl_emit_program(const tg_graph *g, const tg_plan *plan, const tg_fusion *fu, const tg_writeback *wb,
                               int n_wb, const tg_wgsl_limits *lim, tg_wgsl_program *out);
void tg_wgsl_program_free(tg_wgsl_program *p);
/* Tests: 0 plans one kernel per node, 1 fuses (the default), -1 goes back to
 * the environment (TG_WGSL_FUSE=0 turns fusion off). */
void tg_wgsl_set_fusion(int on);
bool tg_wgsl_fusion_enabled(void);
/* TG_WGSL_MM_GROUP=0 turns the sums and groups of products off, for
 * measuring (=lead and =shared: tg_wgsl_matmul_groups_led). */
bool tg_wgsl_mm_groups_enabled(void);

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
