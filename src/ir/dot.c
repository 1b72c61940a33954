/* Graphviz DOT of a graph. Params, inputs, optimizer state and constants are
 * drawn as leaves of their own shapes; forward, backward and optimizer nodes
 * get their own colours, told apart by where they were built (gradient rules
 * live in src/grad, optimizer updates in src/optim; everything else was
 * traced from the caller's function). Captures get a double border. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "ir.h"

typedef enum { PART_FORWARD, PART_BACKWARD, PART_OPTIMIZER } dot_part;

static dot_part node_part(const tg_node *n) {
    const char *f = n->file ? n->file : "";
    if (n->op >= TG_OP_ADAM_M || strstr(f, "optim/")) return PART_OPTIMIZER;
    if (strstr(f, "grad/")) return PART_BACKWARD;
    return PART_FORWARD;
}

/* A name in a DOT label: quotes and backslashes escaped. */
static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

static const char *capture_name(const tg_graph *g, int id) {
    for (int c = 0; c < g->n_caps; c++)
        if (g->caps[c].id == id) return g->caps[c].name;
    return NULL;
}

/* One node's declaration; counts its part (forward/backward/optimizer). */
static void put_node(FILE *f, const tg_graph *g, int i, int *count, const char *indent) {
    static const char *const fill[] = {"white", "mistyrose", "honeydew"};
    const tg_node *n = ir_node(g, i);
    char shape[96];
    tg_shape_str(n->shape, shape, sizeof shape);
    fprintf(f, "%sn%d [label=\"%s", indent, i, tg_ops[n->op].name);
    if (n->name) {
        fputc(' ', f);
        put_escaped(f, n->name);
    }
    fprintf(f, "\\n%s %s\"", shape, tg_dtype_name(n->dtype));
    switch (n->op) {
    case TG_OP_PARAM: fprintf(f, ", shape=ellipse, fillcolor=gold"); break;
    case TG_OP_INPUT: fprintf(f, ", shape=ellipse, fillcolor=lightblue"); break;
    case TG_OP_STATE: fprintf(f, ", shape=ellipse, fillcolor=lightgrey"); break;
    case TG_OP_CONST:
    case TG_OP_ARANGE: fprintf(f, ", shape=note"); break;
    default: {
        dot_part part = node_part(n);
        count[part]++;
        fprintf(f, ", fillcolor=%s", fill[part]);
    }
    }
    const char *cap = capture_name(g, i);
    if (cap) {
        fprintf(f, ", peripheries=2, xlabel=\"capture ");
        put_escaped(f, cap);
        fputc('"', f);
    }
    fprintf(f, "];\n");
}

tg_status tg_ir_graph_dot(const tg_graph *g, const int *group, int n_groups, void *file) {
    FILE *f = file;
    if (!g || !f) return tg_fail(TG_ERR_ARG, "tg_graph_dot: graph and file must not be NULL");
    fprintf(f, "digraph tensorgrad {\n  rankdir=TB;\n"
               "  node [shape=box, style=filled, fillcolor=white, fontname=\"Helvetica\", fontsize=10];\n");
    int count[3] = {0};
    for (int i = 0; i < g->n; i++)
        if (!group || group[i] < 0) put_node(f, g, i, count, "  ");
    /* A fused group's nodes run as one kernel: one cluster each. */
    for (int k = 0; group && k < n_groups; k++) {
        fprintf(f, "  subgraph cluster_fused%d {\n    label=\"fused kernel %d\"; style=dashed; fontname=\"Helvetica\"; "
                   "fontsize=9;\n", k, k);
        for (int i = 0; i < g->n; i++)
            if (group[i] == k) put_node(f, g, i, count, "    ");
        fprintf(f, "  }\n");
    }
    for (int i = 0; i < g->n; i++) {
        const tg_node *n = ir_node(g, i);
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0) fprintf(f, "  n%d -> n%d;\n", n->in[k], i);
    }
    /* A legend with the node counts of each part. */
    fprintf(f, "  subgraph cluster_legend {\n    label=\"legend\"; fontname=\"Helvetica\"; fontsize=10;\n"
               "    l_fwd [label=\"forward (%d)\", fillcolor=white];\n"
               "    l_bwd [label=\"backward (%d)\", fillcolor=mistyrose];\n"
               "    l_opt [label=\"optimizer (%d)\", fillcolor=honeydew];\n"
               "    l_param [label=\"param\", shape=ellipse, fillcolor=gold];\n"
               "    l_fwd -> l_bwd -> l_opt -> l_param [style=invis];\n  }\n}\n",
            count[0], count[1], count[2]);
    if (ferror(f)) return tg_fail(TG_ERR_IO, "tg_graph_dot: write failed");
    return TG_OK;
}

tg_status tg_graph_dot(const tg_graph *g, void *file) { return tg_ir_graph_dot(g, NULL, 0, file); }
