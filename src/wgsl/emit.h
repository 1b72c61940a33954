/* Internals shared by the WGSL emitters: a string builder, the kernel being
 * built, and helpers for the parts every kernel has (entry point, grid,
 * index maps, literals). One emitter per op lives in ops_*.c; the table that
 * maps opcodes to emitters is in ops.c. */
#ifndef TG_WGSL_EMIT_H
#define TG_WGSL_EMIT_H

#include "wgsl.h"

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} wgsl_source;
void tg_source_printf(wgsl_source *b, const char *fmt, ...) TG_PRINTF(2, 3);

/* The kernel under construction. Operand 0 is the output, operand k+1 is
 * input k; the prelude has declared their bindings and accessors:
 *   fn ldK(i: u32) -> T     element i of input K (T = f32, i32 or u32 for bool)
 *   fn st(i: u32, v: T)     element i of the output
 * In a fused kernel (grouping_elementwise.c) ldK may compute its element inline and
 * st may pass the value through an epilogue; the kernel's emitter cannot
 * tell (k->epilogue says there is one: then epilogue(i, v), the epilogue's
 * value for v at i, and store_result(i, y), its store, exist too, and st is
 * store_result(i, epilogue(i, v))).
 *
 * Inline mode. The emitters of ops marked `inl` in tg_wgsl_ops can also
 * write a node as a function of the element index, for a fused kernel to
 * call: with fn_name set, tg_kernel_flat opens `fn <fn_name>(i: u32) -> T` instead
 * of an entry point. Such emitters name their inputs k->load_name[K] and their
 * store k->store_name (never "ld0" or "st" literally), prefix the module-scope
 * functions they declare with k->prefix, and declare shared helpers through
 * tg_kernel_helper so that several inlined nodes can share one module. */
typedef struct {
    const tg_graph *g;
    const tg_node *n;
    int id;
    const tg_plan *plan;
    const tg_wgsl_limits *lim;
    tg_kernel_spec *spec;
    wgsl_source source;   /* the WGSL written so far */
    tg_status status;     /* the first error, TG_OK while fine */
    char load_name[TG_MAX_IN][24]; /* the accessors of the inputs: ld0.. (inline mode: see above) */
    char store_name[24];  /* the output's: st */
    char prefix[16];      /* of the module-scope functions an inlined node declares */
    const char *fn_name; /* inline mode: the function to define */
    uint64_t *helpers;   /* tg_kernel_helper texts already in the module, a bit per id */
    uint64_t own_helpers;
    int phase;           /* kernels that run in two dispatches (split-K matmul): 1, 2; else 0 */
    bool subgroups;      /* the body calls subgroup builtins: the module starts with `enable subgroups;` */
    int sibling;         /* the fused kernel's sibling (tg_wgsl_fused_kernel), stored through st2; 0: none */
    int second_sibling;  /* its second sibling, stored through st3; 0: none */
    bool epilogue;       /* st applies an epilogue chain (which may read memory) before storing */
    unsigned vec4_bind;  /* bindings declared as arrays of vec4<u32> (bit b; tg_kernel_declare) */
    bool st4;            /* fn st4(i: u32, v: vec4<f32>) stores elements i..i+3 (i a multiple of 4) at once */
    unsigned ld4;        /* bit j: fn ldjv(i: u32) -> vec4<f32> loads elements i..i+3 of operand j at once */
    struct {
        char name[8], type[16];
        int64_t n;
    } shared[4];         /* the kernel's var<workgroup> arrays (tg_kernel_shared) */
    int n_shared;
} wgsl_kernel;

/* Module-scope helper texts shared by inlinable emitters (tg_kernel_helper ids). */
enum {
    KERNEL_HELPER_IS_NAN, KERNEL_HELPER_IDIV, KERNEL_HELPER_F2I, KERNEL_HELPER_PRNG,
    KERNEL_HELPER_MATH /* the first of ops_math.c's functions, one id each, up to id 63 */
};
/* Writes `text` unless helper `id` is already in this module. */
void tg_kernel_helper(wgsl_kernel *k, unsigned id, const char *text);
/* fn is_nan(x: f32) -> bool, once per module */
void tg_kernel_is_nan(wgsl_kernel *k);
/* Sets the default names (ld0.., st, no prefix, kernel mode). */
void tg_kernel_names_default(wgsl_kernel *k);

typedef bool (*tg_wgsl_emit_fn)(wgsl_kernel *k);
typedef struct {
    tg_wgsl_emit_fn emit; /* NULL: no kernel (leaves, views) */
} tg_wgsl_op;
/* The op can be written as an inline function (wgsl_kernel's inline mode): ops.def's MAP. */
static inline bool tg_wgsl_inline_ok(tg_opcode op) { return (tg_ops[op].flags & TG_OPF_MAP) != 0; }
extern const tg_wgsl_op tg_wgsl_ops[TG_OP_COUNT];

/* Records an error naming the node ("webgpu: node 12 (matmul [64,64]): ...");
 * returns false. */
bool tg_kernel_fail(wgsl_kernel *k, tg_status s, const char *fmt, ...) TG_PRINTF(3, 4);
const tg_node *tg_kernel_in(const wgsl_kernel *k, int i);
const char *tg_kernel_type(tg_dtype dt);
/* A WGSL f32 expression with exactly the value v (f32_bits(...) for
 * inf/nan/subnormal/-0: the prelude defines fn f32_bits(u32) -> f32). */
const char *tg_kernel_f32(float v, char buf[48]);
/* v as a WGSL i32 literal, INT32_MIN included */
const char *tg_kernel_i32(int32_t v, char buf[24]);
/* "    let <name> = <v as tg_kernel_f32 writes it>;" into the kernel's body */
void tg_kernel_let_f32(wgsl_kernel *k, const char *name, float v);

/* A kernel written outside the per-node driver (a fused group's): tg_kernel_open
 * starts spec sp as node's kernel, tg_kernel_close hands its source to the
 * program (out->n++) or frees it and reports the first error. */
void tg_kernel_open(wgsl_kernel *k, const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, int node, tg_kernel_spec *sp);
tg_status tg_kernel_close(wgsl_kernel *k, tg_wgsl_program *out);
/* Gives nodes[0..n) storage bindings in k->spec, one per arena range and
 * merged where ranges overlap (bind_of[o], and elem_off[o]: the node's
 * first element in it), checking the count, size and alignment limits. */
bool tg_kernel_bind_nodes(wgsl_kernel *k, const int *nodes, int n, int *bind_of, int64_t *elem_off);
/* Declares the kernel's storage bindings b0.. as arrays of `type`: read-only
 * where the kernel writes nothing of that buffer (emit.c says the rule). */
void tg_kernel_declare(wgsl_kernel *k, const char *type, unsigned written, bool work);
/* Whether operand o of nodes[0..n) (bound by tg_kernel_bind_nodes) can be
 * stored 4 elements at a time through a vec4<u32> view of its binding: f32,
 * its first element and its count multiples of 4, every operand sharing the
 * binding within its whole vec4s (they are read a component at a time). */
bool tg_kernel_vec4_ok(const wgsl_kernel *k, const int *nodes, int n, const int *bind_of, const int64_t *elem_off, int o);
/* "b<bind>[...]" for element i of an operand at elem_off in its binding:
 * a u32 element of an array of u32, or of a vec4<u32> view (vec4_bind). */
void tg_kernel_elem(const wgsl_kernel *k, int bind, int64_t elem_off, char *buf, size_t n);
/* "b<bind>[...]" for the vec4<u32> holding elements i..i+3 (i a multiple of
 * 4) of an operand at elem_off in a binding with a vec4 view. */
void tg_kernel_elem4(int bind, int64_t elem_off, char *buf, size_t n);

/* Declares `var<workgroup> name: array<type, n>` (type f32, i32, u32 or
 * vec4<f32>; at most 4 arrays a kernel), before the entry point. The device
 * does not zero workgroup memory (device.c), so a kernel must write every
 * element it reads. Tests check that: with tg_wgsl_forms.poison the entry point
 * first fills these arrays with NaN bits (tg_kernel_poison, which tg_kernel_main
 * calls; an emitter that opens its own entry point calls it there). */
void tg_kernel_shared(wgsl_kernel *k, const char *name, const char *type, int64_t n);
void tg_kernel_poison(wgsl_kernel *k, uint32_t wg);

/* Emits the entry point header for `groups` workgroups of `wg` invocations,
 * splitting the grid in 2-D when one dimension is not enough. Inside, `gid`
 * is the workgroup's linear index and `lid` the local index; the caller
 * writes the body and closes it with tg_kernel_end. */
bool tg_kernel_main(wgsl_kernel *k, int64_t groups, uint32_t wg);
/* An elementwise kernel over n items: thread `i` (u32), already range-checked.
 * In inline mode: the function of element i instead (see wgsl_kernel). */
bool tg_kernel_flat(wgsl_kernel *k, int64_t n);
void tg_kernel_end(wgsl_kernel *k);

/* fn name(i: u32) -> u32: the flat row-major index i over dims d[0..nd)
 * mapped to sum(coord * st). */
void tg_kernel_index_fn(wgsl_kernel *k, const char *name, int nd, const int64_t *d, const int64_t *st);
/* Index maps ldK for a broadcasting elementwise op: writes `fn <pfx>mapK(i)`
 * for each input whose layout differs from the output's and sets expr[K] to
 * "<pfx>mapK(i)" or "i" or "0u". */
#define KERNEL_EXPR_LEN 40
void tg_kernel_bcast_maps(wgsl_kernel *k, int nin, char expr[][KERNEL_EXPR_LEN]);

/* ---- row and column kernels (rows.c) ---- */
/* Invocations per workgroup for a row of len elements: a power of two from
 * 32 to 64 (tg_wgsl_forms.row_workgroup: to 1024), within the device's limit. */
uint32_t tg_kernel_row_wg(const wgsl_kernel *k, int64_t len);
/* var<workgroup> red: array<type, wg> */
void tg_kernel_red_decl(wgsl_kernel *k, uint32_t wg, const char *type);
/* Every invocation contributes `val`; all then hold the sum (or max) in `out`. */
void tg_kernel_reduce(wgsl_kernel *k, uint32_t wg, const char *val, bool is_max, const char *out);

/* A kernel over `lines` rows of A elements each, element a of row l at
 * base + a * inner. Opened with tg_kernel_rows_open (defines `l` and `base`), then
 * loops (tg_kernel_rows_loop: `a` and the element index `p`), per-row reductions
 * (tg_kernel_rows_combine: a no-op with one thread per row) and tg_kernel_end. Rows longer
 * than 32 get a workgroup each, shorter ones a thread. */
typedef struct {
    wgsl_kernel *k;
    bool wide;
    uint32_t wg;
    int64_t lines, A, inner;
    int regs;                /* elements per invocation held in registers (0: passes read memory) */
    uint32_t sg;             /* a row per subgroup of this size (0: a row per workgroup) */
    uint32_t step;           /* the row's elements an invocation walks: me, me + step, ... */
    const char *me;          /* its position in the row: lid, or lane with a row per subgroup */
    unsigned by_row, by_col; /* tg_kernel_rows_cache's inputs */
    bool sg_named;           /* the subgroup reduction's names are declared */
} row_kernel;
bool tg_kernel_rows_open(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner);
/* The same for a kernel that writes a few values per row (statistics): a
 * row per subgroup by default where the device allows it (rows.c). */
bool tg_kernel_rows_open_stats(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner);
/* The same for a layer norm's forward: a row per subgroup by default, 8 to
 * a workgroup on subgroups of 32 (rows.c). */
bool tg_kernel_rows_open_norm(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner);
void tg_kernel_rows_loop(row_kernel *L, const char *len); /* caller writes the body and "    }\n" */
/* Elements per invocation of a row of A elements in a workgroup of its own
 * in the register form (rows.c); 0 where that form does not apply (rows
 * of 32 or fewer, the loop form forced, or too long a row). */
int tg_kernel_rows_regs(const tg_wgsl_limits *lim, int64_t A);
/* A kernel over `lines` rows of A contiguous elements in S workgroups, each
 * walking a chunk of `chunk` rows in turn (rows l0 <= l < l1), in the
 * register form with a row per workgroup (tg_kernel_rows_regs > 0, else it
 * fails). Registers declared after this and before tg_kernel_rows_chunk_row
 * hold across the rows. tg_kernel_rows_chunk_row opens the loop over the rows
 * (defines `l` and `base`); then the usual tg_kernel_rows_cache, passes and
 * sums; the caller closes it with "    }\n". */
bool tg_kernel_rows_open_chunks(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t S, int64_t chunk);
void tg_kernel_rows_chunk_row(row_kernel *L);
/* The inputs (bit K: ldK) a kernel reads at the row's elements (by_row:
 * ldK(p)) or at their position in the row (by_col: ldK(a), a gain): bodies
 * of tg_kernel_rows_each read them as vK. In the register form (the default,
 * rows.c) each invocation reads its elements of them here, once. Call it
 * right after tg_kernel_rows_open. */
void tg_kernel_rows_cache(row_kernel *L, unsigned by_row, unsigned by_col);
/* A pass over the row's elements a < len (NULL: the whole row) running
 * `body` (statements on a, p and the cached vK, each line indented by 8
 * spaces) for each; unrolled over the registers in the register form. */
void tg_kernel_rows_each(row_kernel *L, const char *len, const char *body);
void tg_kernel_rows_combine(row_kernel *L, const char *var, bool is_max, const char *out);
/* Two sums at once (va -> oa, vb -> ob): with subgroups, behind one pair of barriers. */
void tg_kernel_rows_combine2(row_kernel *L, const char *va, const char *vb, const char *oa, const char *ob);
/* Opens a block run by one invocation per row (close it with "    }\n"). */
void tg_kernel_rows_once(row_kernel *L);

/* A whole kernel summing `expr` (in terms of u32 r and c) over rows r < R into
 * output element c < C, with R and C those of tg_wgsl_colsum_dims for the
 * kernel's node (so the phases and the workspace agree with it): 8 or 32
 * columns per workgroup, interleaved row sets; or, when tg_kernel_colsum_chunks(R,
 * C) > 1, phase 1 (partial sums of row chunks into `work`) or phase 2
 * (their sums, stored) of the two-phase form. */
bool tg_kernel_colsum(wgsl_kernel *k, const char *expr, const char *type);
/* The same with a second sum of expr2 (NULL: none) over the same rows,
 * stored through st2 (a fused sibling); the two-phase form's workspace then
 * holds both partials (tg_wgsl_phases counts them). */
bool tg_kernel_colsum2(wgsl_kernel *k, const char *expr, const char *expr2, const char *type);
/* The same over R rows and C columns given here, in S chunks (S > 1: phase 1,
 * partials into `work`), stored through the functions st and st2 names. */
bool tg_kernel_colsum_rows(wgsl_kernel *k, int64_t R, int64_t C, int S, const char *expr, const char *expr2, const char *type,
                       const char *st, const char *st2);
/* Phase 2 of a split column sum: output c < C is the sum of work[s * C + c]
 * over the S chunks, in order, stored through st (and, with two, a second
 * sum's partials after the first's, through st2). */
bool tg_kernel_colsum_combine(wgsl_kernel *k, int S, int64_t C, const char *type, bool two);
/* An embedding gradient by warps (ops_nn.c): R rows of D columns into a
 * [V, D] table, `groups` workgroups of 32 columns, S chunks of `chunk`
 * rows, nw warps a workgroup. False where it takes the column-sum form. */
typedef struct {
    int64_t R, V, D, groups, chunk;
    int S, nw;
} tg_wgsl_emb_split;
bool tg_wgsl_embedding_grad_split(const tg_graph *g, const tg_node *n, const tg_wgsl_limits *lim, tg_wgsl_emb_split *e);
/* Sorted scatter-adds (scatter.c): two phases, the indices sorted in
 * phase 1 into tg_wgsl_sort_work(R, V) bytes of workspace a line (R
 * indices into V slots), each slot's segment summed in phase 2. The
 * embedding gradient takes this form where the warps form does not apply;
 * take_along_axis's gradient where tg_wgsl_take_grad_sorted says so (and
 * gives the workspace). */
int64_t tg_wgsl_sort_work(int64_t R, int64_t V);
bool tg_wgsl_embedding_grad_sorted(wgsl_kernel *k);
bool tg_wgsl_take_grad_sorted(const tg_graph *g, const tg_node *n, const tg_wgsl_limits *lim, int64_t *work_bytes);
bool tg_wgsl_take_along_axis_grad_sorted(wgsl_kernel *k);
/* Row chunks a column sum of R rows and C columns is split into (1: one kernel). */
int tg_kernel_colsum_chunks(int64_t R, int64_t C);
/* Whether node n's kernel is a column sum (tg_kernel_colsum), and over what:
 * R rows, C columns (ops_reduce.c; its emitters use the same shapes). */
bool tg_wgsl_colsum_dims(const tg_graph *g, const tg_node *n, int64_t *R, int64_t *C);
/* conv2d_grad_weight's column sum, if it takes that form (ops_conv.c). */
bool tg_wgsl_conv2d_dw_dims(const tg_graph *g, const tg_node *n, int64_t *R, int64_t *C);

/* The emitter of each kernel family of ops.def, tg_wgsl_<kernel>, declared
 * from its kernel column (`none` is declared and never defined: the op
 * table, ops.c, reads NULL there). The families WGSL writes with a shared
 * emitter are mapped first. They live in ops_ew.c, ops_reduce.c,
 * ops_matmul.c, ops_math.c, ops_nn.c and ops_conv.c; below the list, the
 * helpers some of them share with the fused kernels. */
#define tg_wgsl_permute tg_wgsl_copy /* a gather through the strides */
#define tg_wgsl_broadcast tg_wgsl_copy
#define tg_wgsl_log_softmax tg_wgsl_softmax_lines /* one line per workgroup */
#define tg_wgsl_log_softmax_grad tg_wgsl_softmax_lines
#define tg_wgsl_softmax_grad tg_wgsl_softmax_lines
#define tg_wgsl_adam_m tg_wgsl_optim
#define tg_wgsl_adam_v tg_wgsl_optim
#define tg_wgsl_adam_p tg_wgsl_optim
#define tg_wgsl_sgd_v tg_wgsl_optim
#define tg_wgsl_sgd_p tg_wgsl_optim
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) bool tg_wgsl_##kernel(wgsl_kernel *k);
#include "../ir/ops.def"

/* A math row of ops.def (TG_OPF_MATH) inside other code (the clip norm's
 * scalars): the module-scope functions op's expression calls, written
 * before the entry point; then `var t<id>`, node n's forward over the
 * given operand expressions (one each), written in the body. */
void tg_wgsl_math_helpers(wgsl_kernel *k, tg_opcode op);
void tg_wgsl_math_value(wgsl_kernel *k, const tg_node *n, const char *const *operand, int id);

/* SGD's new param into `let u` from the bound g, p, mu, wd, lr and, with
 * momentum, v (the new velocity): tg_wgsl_optim and the fused optimizer
 * group pick the step direction here, once */
void tg_wgsl_sgd_step(wgsl_kernel *k, bool momentum, bool nesterov);
/* tg_wgsl_matmul writes phases 1 and 2 when tg_wgsl_matmul_split says so;
 * they use `work`. The column sum `sum` (R rows, C columns: tg_wgsl_colsum_dims) can be the
 * sibling of the split product mm: it sums mm's B (not transposed, no
 * batch) over K = R rows into C = N columns, in mm's two phases (a bias
 * gradient beside its weight gradient). */
bool tg_wgsl_matmul_colsum_ok(const tg_graph *g, int mm, int sum, int64_t R, int64_t C);
/* The workspace of split product mm with such a sibling: its partial
 * products, then one partial column sum per K-range. */
int64_t tg_wgsl_matmul_colsum_work(const tg_graph *g, int mm);
/* Node a is an f32 product that runs in one dispatch (its K is not split):
 * what a matmul group or sum requires of each member. */
bool tg_wgsl_matmul_whole(const tg_graph *g, int a);
/* Before k's bindings are declared: which of them product k->id (one
 * dispatch, or phase 1 of two) views as vec4s, setting k->vec4_bind,
 * k->st4 (its output, operand 0 of nodes, stored 4 columns at a time:
 * phase 0, tiles covering the output exactly) and k->ld4 (its operands A
 * and B, at nodes[at[0]] and nodes[at[1]], -1 where not read from memory,
 * loaded 4 elements at a time). */
void tg_wgsl_matmul_views(wgsl_kernel *k, const int *nodes, int n, const int *bind_of, const int64_t *elem_off, const int at[2]);
/* Node id's product, with or without an epilogue, may load operand j (0:
 * A, 1: B) 4 elements at a time along its contiguous axis (the chosen
 * rule; tests). */
bool tg_wgsl_matmul_vec4_load(const tg_graph *g, int id, int j, bool epilogue);
/* Products a and b can run as one kernel (tg_wgsl_matmul_group): f32, the
 * same A (or with !same_a, one of the same shape), different Bs of one
 * shape, the same transposes. */
bool tg_wgsl_matmul_groupable(const tg_graph *g, int a, int b, bool same_a);
/* Whether a product may lead a group of products of one other A: yes
 * (ops_matmul.c), unless tg_wgsl_forms.matmul_lead says no. */
bool tg_wgsl_matmul_groups_led(void);
/* How many different As the products mm[0..n) read. */
int tg_wgsl_matmul_group_inputs(const tg_graph *g, const int *mm, int n);
/* The K-ranges of the group mm[0..n) (1: one dispatch; else two phases
 * sharing *work_bytes of workspace): the members' tiles fill the GPU
 * together, so each gets fewer ranges than it would alone, and no more
 * than fit in `most` bytes of workspace (the program's largest without
 * the group). 0: the group would need a split it cannot have there. */
int tg_wgsl_matmul_group_split(const tg_graph *g, const int *mm, int n, int64_t most, int64_t *work_bytes);
/* The kernel of products mm[0..n) that tg_wgsl_matmul_groupable pairs, in
 * `split` K-ranges (tg_wgsl_matmul_group_split), into k (opened with
 * tg_kernel_open at the group's turn; k->phase 1 or 2 when split > 1). */
bool tg_wgsl_matmul_group(wgsl_kernel *k, const int *mm, int n, int split);
/* Products a and b can be summed in one kernel (tg_wgsl_matmul_sum): plain
 * f32 products of one geometry (shapes and transposes), neither split. */
bool tg_wgsl_matmul_summable(const tg_graph *g, int a, int b);
/* The kernel storing out = the sum of the products mm[0..n) in order. */
bool tg_wgsl_matmul_sum(wgsl_kernel *k, const int *mm, int n, int out);
/* norm_dx's work on row l (opened, x, gain and gy cached as v0, v1, v2;
 * stats at ld3): dx through st. */
void tg_wgsl_norm_dx_row(row_kernel *L);
/* The fused norm backward (norm_bwd.c): norm_dx with the gain's gradient
 * (k->sibling) and the bias's (k->second_sibling) summed over its rows. */
bool tg_wgsl_norm_bwd(wgsl_kernel *k);
/* The row chunks of norm_dx node dx fused with its siblings (bias: with the
 * bias's too) on a device of these limits; 0 where the fused form does not
 * apply. Its dispatches (2 where it has more than one chunk, sharing
 * *work_bytes of workspace). */
int tg_wgsl_norm_bwd_chunks(const tg_graph *g, int dx, bool bias, const tg_wgsl_limits *lim);
int tg_wgsl_norm_bwd_phases(const tg_graph *g, int dx, bool bias, const tg_wgsl_limits *lim, int64_t *work_bytes);

#endif
