/* Data parallelism at the session level: the ranks agree on every outcome
 * that decides whether they stay in step (a compile, a checkpoint, a step
 * that failed on one of them), and rank 0's params and optimizer state are
 * the ones every rank starts from. The session passes in its engine,
 * program and position; nothing here reads a session. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"

tg_status tg_dp_check_comm(const tg_comm *c, const char *api) {
    if (c->size < 1 || c->rank < 0 || c->rank >= c->size)
        return tg_fail(TG_ERR_ARG, "%s: spec.comm: rank %d of size %d (want 0 <= rank < size)", api, c->rank, c->size);
    if (!c->allreduce_sum_f32 || !c->broadcast)
        return tg_fail(TG_ERR_ARG, "%s: spec.comm: allreduce_sum_f32 and broadcast are required", api);
    if (!(c->timeout_s >= 0) || c->timeout_s > 1e9)
        return tg_fail(TG_ERR_ARG, "%s: spec.comm: timeout_s is %g (want seconds from 0, the default, to 1e9)", api,
                       c->timeout_s);
    if (c->bucket_bytes < 0)
        return tg_fail(TG_ERR_ARG, "%s: spec.comm: bucket_bytes is %lld (want bytes, or 0 for the default)", api,
                       (long long)c->bucket_bytes);
    return TG_OK;
}

/* The comm is the user's: its message may fill the array with no NUL. A
 * timeout's message says so itself ("timed out after ..."). */
static tg_status comm_fail(tg_comm *c, tg_status st, const char *api, const char *what) {
    return tg_fail(st, "%s: data-parallel: %s %s%.*s", api, what, st == TG_ERR_TIMEOUT ? "" : "failed: ",
                   (int)sizeof c->error, c->error[0] ? c->error : tg_status_name(st));
}

tg_status tg_dp_verdict(tg_comm *c, const float *statuses, tg_status mine, const char *mine_msg, const char *api) {
    int first = -1;
    for (int r = 0; r < c->size && first < 0; r++)
        if (statuses[r] != 0) first = r;
    if (first < 0) return TG_OK;
    /* Every rank knows who failed first: that rank's message goes to all. */
    char msg[400] = "";
    if (c->rank == first) snprintf(msg, sizeof msg, "%s", mine_msg);
    c->error[0] = 0;
    tg_status st = c->broadcast(c, msg, sizeof msg, first);
    if (mine != TG_OK) return tg_fail(mine, "%s", mine_msg);
    if (st != TG_OK) return comm_fail(c, st, api, "sending a failed rank's message");
    msg[sizeof msg - 1] = 0;
    float s = statuses[first];
    tg_status theirs = s >= 1 && s <= TG_ERR_TIMEOUT ? (tg_status)s : TG_ERR_BACKEND;
    size_t k = strlen(api);
    const char *why = strncmp(msg, api, k) == 0 && msg[k] == ':' && msg[k + 1] == ' ' ? msg + k + 2 : msg;
    return tg_fail(theirs, "%s: rank %d of %d failed: %s", api, first, c->size, why);
}

tg_status tg_dp_agree(tg_comm *c, tg_status mine, const char *api) {
    char mine_msg[400] = "";
    if (mine != TG_OK) snprintf(mine_msg, sizeof mine_msg, "%s", tg_last_error());
    float small[64], *v = c->size <= 64 ? small : tg_calloc((size_t)c->size, sizeof(float));
    if (!v) return tg_fail(TG_ERR_NOMEM, "%s: data-parallel: out of memory", api);
    memset(v, 0, sizeof(float) * (size_t)c->size);
    v[c->rank] = (float)mine;
    c->error[0] = 0;
    tg_status st = c->allreduce_sum_f32(c, v, c->size);
    if (st == TG_OK) st = tg_dp_verdict(c, v, mine, mine_msg, api);
    else st = comm_fail(c, st, api, "agreeing on every rank's status");
    if (v != small) free(v);
    return st;
}

/* What a rank receives from rank 0: the position, then the params arena
 * and every optimizer state buffer. (The schedule is the spec's on every
 * rank: the program signature covers it.) */
tg_status tg_dp_sync(tg_comm *c, tg_engine *e, tg_program *p, tg_dp_position *pos, const char *api) {
    const tg_plan *pl = &p->plan;
    int64_t total = (int64_t)sizeof *pos + e->params_bytes;
    for (int i = 0; i < p->g->n; i++)
        if (p->g->nodes[i].op == TG_OP_STATE && pl->slot[i].root == i) total += pl->slot[i].bytes;
    char *buf = malloc((size_t)total);
    tg_status st = buf ? TG_OK : tg_fail(TG_ERR_NOMEM, "%s: data-parallel: out of memory for %lld bytes", api,
                                         (long long)total);
    /* Every rank makes the broadcast call, even one that cannot fill or
     * take it: a rank that left would leave the others waiting. */
    char one;
    int64_t at = sizeof *pos;
    if (st == TG_OK && c->rank == 0) {
        memcpy(buf, pos, sizeof *pos);
        st = e->vt->read(e, p, TG_ARENA_PARAMS, 0, buf + at, e->params_bytes);
        at += e->params_bytes;
        for (int i = 0; st == TG_OK && i < p->g->n; i++)
            if (p->g->nodes[i].op == TG_OP_STATE && pl->slot[i].root == i) {
                st = e->vt->read(e, p, pl->slot[i].arena, pl->slot[i].offset, buf + at, pl->slot[i].bytes);
                at += pl->slot[i].bytes;
            }
    }
    c->error[0] = 0;
    tg_status sent = c->broadcast(c, buf ? (void *)buf : &one, buf ? total : 1, 0);
    if (st == TG_OK && sent != TG_OK) st = comm_fail(c, sent, api, "the broadcast of rank 0's params and state");
    if (st == TG_OK && c->rank != 0) {
        memcpy(pos, buf, sizeof *pos);
        at = sizeof *pos;
        st = e->vt->write(e, p, TG_ARENA_PARAMS, 0, buf + at, e->params_bytes);
        at += e->params_bytes;
        for (int i = 0; st == TG_OK && i < p->g->n; i++)
            if (p->g->nodes[i].op == TG_OP_STATE && pl->slot[i].root == i) {
                st = e->vt->write(e, p, pl->slot[i].arena, pl->slot[i].offset, buf + at, pl->slot[i].bytes);
                at += pl->slot[i].bytes;
            }
    }
    free(buf);
    return st;
}

tg_status tg_dp_agree_program(tg_comm *c, const tg_program *p, tg_status st, const char *api) {
    uint64_t mine = p && p->dp ? tg_dp_of(p->dp)->signature : 0, rank0 = mine;
    c->error[0] = 0;
    tg_status sent = c->broadcast(c, &rank0, sizeof rank0, 0);
    if (sent != TG_OK) {
        if (st == TG_OK) st = comm_fail(c, sent, api, "the broadcast of rank 0's program signature");
    } else if (st == TG_OK && rank0 != 0 && mine != rank0) {
        st = tg_fail(TG_ERR_STATE, "%s: data-parallel: rank %d's model, optimizer or gradients differ from rank 0's "
                     "(every rank must make its session from the same spec)", api, c->rank);
    }
    return tg_dp_agree(c, st, api);
}
