/* Data parallelism inside a training step (docs/distributed.md).
 *
 * Every rank runs the same program on its own share of the batch. At the
 * program's cut (engine.h: after the last node of the backward, before the
 * step check, clipping and the optimizer) the gradients and the loss are
 * averaged over the ranks, so every rank then applies the same update to
 * the same params and reports the same loss.
 *
 * What is averaged is storage classes of the plan (a gradient and the views
 * of it share one), each a segment of an arena. The segments are packed into
 * buckets, one all-reduce each, in the order the backward finishes them: a
 * bucket is ready once every node before the cut that writes or reads its
 * memory has run, so averaging it in place cannot race the backward. The
 * last bucket holds the loss and one float per rank, that rank's status for
 * the step: a rank whose step failed before the cut (a NaN under
 * check_numerics, a backend error) makes every rank fail the step with its
 * message, and no rank waits in a collective that another has left.
 *
 * On the CPU, with a concurrent comm, a thread of the session all-reduces
 * each bucket once the step passes its turn (tg_dp_reached), beside the rest
 * of the backward; otherwise (WebGPU, or a comm that must stay on the
 * caller's thread) every bucket is exchanged at the cut. */
#ifndef TG_DP_H
#define TG_DP_H

#include <pthread.h>

#include "../engine.h"

/* A segment: `bytes` at `offset` of arena `arena`, packed from float `at`. */
typedef struct {
    int arena;
    int64_t offset, bytes, at;
} tg_dp_seg;

/* A bucket: segments seg[seg0 .. seg0 + n_seg), floats pack[at .. at + n);
 * ready: the turn after which nothing before the cut touches them. */
typedef struct {
    int seg0, n_seg;
    int64_t at, n;
    int ready;
} tg_dp_bucket;

struct tg_dp {
    tg_comm *comm;
    int cut;
    tg_dp_seg *seg;
    int n_seg;
    tg_dp_bucket *bk; /* the last one is the tail: the loss (when it has memory to write) and the statuses */
    int n_bk;
    float *pack;
    int64_t n_pack, status_at; /* the statuses: pack[status_at + rank] */
    uint64_t signature;        /* params, optimizer, state and exchange layout: each rank's must be rank 0's */
    /* one step */
    char *const *arena; /* host arenas (CPU): the exchange packs and unpacks; NULL: the engine does (WebGPU) */
    int posted;         /* buckets handed to the thread */
    /* the thread that overlaps the all-reduces with the backward */
    bool threaded;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    bool quit;
    tg_status err;
    char msg[400];
    tg_comm_stats stats;
};
typedef struct tg_dp tg_dp;

/* The exchange for program p (planned, fused) of a session with optimizer o;
 * overlap: the engine reports its turns (tg_dp_reached) and owns host arenas. */
tg_status tg_dp_new(tg_comm *comm, const tg_program *p, const tg_optim *o, bool overlap, tg_dp **out);
void tg_dp_free(tg_dp *dp);

/* A step, as an engine drives it: begin (arena: the host arenas, or NULL when
 * the engine fills dp->pack from every segment before the cut and writes
 * them back after it), reached after each kernel (turn: its node), then cut
 * with this rank's status so far. cut returns the agreed status: TG_OK when
 * every rank's step reached the cut, else every rank's step fails. */
void tg_dp_step_begin(tg_dp *dp, char *const *arena);
void tg_dp_reached(tg_dp *dp, int turn);
tg_status tg_dp_step_cut(tg_dp *dp, tg_status local);

/* Session-level (agree.c). A comm that can be called at all: TG_ERR_ARG otherwise. */
tg_status tg_dp_check_comm(const tg_comm *c, const char *api);
/* Every rank's status: TG_OK when every rank passed TG_OK as mine; else an
 * error on every rank, its own (message kept) where mine failed, else the
 * message of the first rank that failed. */
tg_status tg_dp_agree(tg_comm *c, tg_status mine, const char *api);
/* The status an exchange's tail carried (statuses[r]: rank r's), as tg_dp_agree decides it. */
tg_status tg_dp_verdict(tg_comm *c, const float *statuses, tg_status mine, const char *mine_msg, const char *api);
/* The comm of a data-parallel session, NULL for one without. */
tg_comm *tg_session_dp_comm(const tg_session *s);
/* After a compile of p that gave this rank st (p NULL when it failed):
 * every rank checks its program against rank 0's and they agree. */
tg_status tg_dp_agree_program(tg_comm *c, const tg_program *p, tg_status st, const char *api);
/* After a compile that gave this rank st (s NULL when it failed): every rank
 * checks its program against rank 0's and they agree; then rank 0's seed,
 * params and optimizer state go to every rank. */
tg_status tg_dp_session_start(tg_comm *c, tg_session *s, tg_status st);
/* Rank 0's seed, step, schedule, params and optimizer state, to every rank. */
tg_status tg_dp_sync(tg_session *s, const char *api);
#endif
