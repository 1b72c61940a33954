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

/* Kernel forms. Where a kernel has several forms, the generator picks one
 * by shape and device (each rule beside its form, with its reason). Tests
 * force each form to check it against the others, and the row benchmark
 * (bench_tg --rows-webgpu) to time each: they fill a tg_wgsl_forms and
 * hand it to tg_wgsl_force_forms. 0 in a field (TG_WGSL_CHOOSE) leaves
 * that choice to the generator; a field's comment lists its other values. */
enum { TG_WGSL_OFF = -1, TG_WGSL_CHOOSE = 0, TG_WGSL_ON = 1 };
enum { TG_WGSL_TILE_LARGE = 1, TG_WGSL_TILE_TALL, TG_WGSL_TILE_SMALL };
enum { TG_WGSL_WARPS_ROWS = 1, TG_WGSL_WARPS_SQUARE };
enum { TG_WGSL_ROWS_LOOP = 1, TG_WGSL_ROWS_REGISTERS };
enum { TG_WGSL_REDUCE_TREE = 1, TG_WGSL_REDUCE_SUBGROUP, TG_WGSL_REDUCE_ROW_PER_SUBGROUP };
enum { TG_WGSL_NORM_WORKGROUP = 1, TG_WGSL_NORM_ROW_PER_SUBGROUP };
enum { TG_WGSL_ATTN_ROW_LOOPS = 1, TG_WGSL_ATTN_ROWS, TG_WGSL_ATTN_TILES };
typedef struct {
    bool unfused; /* one kernel per node: the fusion pass chooses no groups */
    /* products (ops_matmul.c) */
    int matmul_tile;    /* TG_WGSL_TILE_LARGE (128 x 128), _TALL (128 x 64), _SMALL (64 x 64) */
    int matmul_split;   /* N > 0: every product's K in N ranges (two dispatches) */
    int matmul_unroll;  /* ON: k-slices written out step by step (a GPU's form); OFF: as a loop (a CPU adapter's) */
    int matmul_warps;   /* a warp's register blocks: TG_WGSL_WARPS_ROWS (16 x 2) or _SQUARE (8 x 4) */
    int matmul_store4;  /* ON: results stored 4 columns at a time wherever they can be; OFF: never */
    int matmul_load4;   /* ON: operands loaded 4 elements at a time wherever they can be; OFF: never */
    int matmul_lead;    /* OFF: no product leads a group of products of another A */
    /* rows and columns (rows.c) */
    int rows;           /* long rows: TG_WGSL_ROWS_LOOP (every pass reads memory) or _REGISTERS */
    int reduce;         /* TG_WGSL_REDUCE_TREE, _SUBGROUP (subgroup sums in a workgroup per row) or
                         * _ROW_PER_SUBGROUP (where one fits) */
    int norm;           /* a layer norm's forward: TG_WGSL_NORM_WORKGROUP or _ROW_PER_SUBGROUP a row */
    uint32_t row_workgroup; /* a power of two from 32 to 1024: the most invocations a long row's workgroup
                             * grows to, and a workgroup of rows a subgroup each has */
    int colsum_chunks;  /* OFF: one kernel; N > 0: N chunks of rows, at any size */
    int colsum_width;   /* 8, 32, 64 or 128 columns a workgroup */
    int norm_backward;  /* OFF: norm_dx and the column sums as kernels of their own; N > 0: fused, in N chunks */
    int embedding_grad; /* OFF: the sorted form (scatter.c); N > 0: the warps form in at most N chunks of rows */
    /* attention (ops_attention.c, ops_attention_tiles.c) */
    int attention;      /* TG_WGSL_ATTN_ROW_LOOPS, _ROWS or _TILES (where they fit) */
    int attention_shuffles; /* OFF: the blocks' row sums through workgroup memory, not subgroup shuffles */
    /* checks (tests/test_webgpu_robust.sh) */
    bool poison;        /* every kernel first fills its workgroup memory with NaN bits (tg_kernel_poison) */
    bool read_write;    /* every binding declared read_write, none read-only (tg_kernel_declare) */
} tg_wgsl_forms;
/* Every kernel generated from now on takes forms f (copied); NULL: the
 * generator's choices again. Not for use while another thread compiles. */
void tg_wgsl_force_forms(const tg_wgsl_forms *f);
/* The forms in force (every field 0 unless a test or benchmark forced one). */
const tg_wgsl_forms *tg_wgsl_forced(void);

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
    unsigned read_only;      /* bit b: binding b is var<storage, read> (tg_kernel_declare) */
    int64_t threads;         /* work items (elements, rows or tiles x threads) */
    uint32_t workgroup_size; /* invocations per workgroup */
    uint32_t dispatch[3];    /* workgroups in x, y, z */
    const void *upload;      /* a literal constant: bytes written at compile instead */
    int64_t upload_bytes;
    int64_t workspace;       /* bytes of the program's workspace it binds (0: none) */
    bool attention_work;     /* it binds the attention statistics (the workspace's first part), not the
                              * scratch the other kernels share after them */
    bool gated;              /* it does nothing when the step check is not finite (tg_wgsl_limits.gate_updates) */
    /* For TG_PROFILE: a product kernel's M, N and K of one of its
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
/* A fused kernel (chosen before planning, grouping.c): node `kernel`'s
 * emitter writes the entry point; the nodes in `inlined` (topological
 * order: inputs before readers) are computed inline wherever a member
 * reads them, never stored; the chain `epilogue` (each reading the one
 * before, or the kernel node, at the element being stored) transforms
 * every value the kernel stores, and its last node is what lands in memory
 * instead. A sibling (> 0) is a second node the kernel's emitter computes
 * from the kernel node's own inputs and stores through st2 (a layer norm's
 * bias gradient beside its gain gradient, a bias gradient beside a split
 * weight gradient); 0 is none, as node 0 is always a leaf. A second
 * sibling (> 0, beside a sibling only) is stored through st3: the fused
 * norm backward's bias gradient (norm_bwd.c), whose sibling is the gain
 * gradient. */
typedef struct {
    int kernel;
    int *inlined, n_inlined;
    int *epilogue, n_epilogue;
    int sibling, second_sibling;
} tg_wgsl_fused_kernel;
tg_status tg_wgsl_emit_fused(const tg_graph *g, const tg_plan *plan, const tg_wgsl_fused_kernel *f, const tg_wgsl_limits *lim,
                             tg_kernel_spec *out);
/* A kernel that runs as two dispatches (phase 1 then 2) sharing `work_bytes`
 * of the program's workspace: a matmul with its K split into ranges, or a
 * tall column sum with its rows split (tg_wgsl_phases asks both).
 * tg_wgsl_matmul_split says how many ranges node id's matmul takes (1: one
 * kernel) and the workspace they need. */
int tg_wgsl_matmul_split(const tg_graph *g, int id, int64_t *work_bytes);
tg_status tg_wgsl_emit_phase(const tg_graph *g, const tg_plan *plan, const tg_wgsl_fused_kernel *f, int phase, int64_t work_bytes,
                             const tg_wgsl_limits *lim, tg_kernel_spec *out);
/* How many dispatches node id's kernel takes on a device of these limits:
 * 1, or 2 (phase 1 then 2, sharing work_bytes of the workspace): a matmul
 * whose K is split (tg_wgsl_matmul_split), a tall column sum whose rows
 * are (rows.c), an embedding gradient over row chunks (ops_nn.c). */
int tg_wgsl_phases(const tg_graph *g, int id, const tg_wgsl_limits *lim, int64_t *work_bytes);
/* How many dispatches fused kernel f takes (tg_wgsl_phases of its kernel
 * node, or of the fused norm backward, norm_bwd.c) and the workspace they
 * share, its siblings' partial sums included. */
int tg_wgsl_fused_phases(const tg_graph *g, const tg_wgsl_fused_kernel *f, const tg_wgsl_limits *lim, int64_t *work_bytes);
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
/* The fusion pass before planning (grouping.c): causal attentions, then
 * products with an epilogue, siblings, sums and groups of products, then
 * elementwise chains (inline producers, epilogues); pinned: nodes read
 * from outside, never absorbed; cut: the end of the backward, which no
 * elementwise group spans. *out = NULL when there are no groups;
 * (*out)->impl is a tg_wgsl_chosen_groups (fused_attention.h), the attentions being
 * the first groups. */
tg_status tg_wgsl_choose_groups(const tg_graph *g, const bool *pinned, int cut, const tg_wgsl_limits *lim, tg_fusion **out);
/* fu: the groups chosen before planning (tg_wgsl_choose_groups), NULL for none. */
tg_status tg_wgsl_emit_program(const tg_graph *g, const tg_plan *plan, const tg_fusion *fu, const tg_writeback *wb,
                               int n_wb, const tg_wgsl_limits *lim, tg_wgsl_program *out);
void tg_wgsl_program_free(tg_wgsl_program *p);

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
