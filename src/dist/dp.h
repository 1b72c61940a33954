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
 * each bucket once the step passes its turn (the exchange's reached hook),
 * beside the rest of the backward; otherwise (WebGPU, or a comm that must
 * stay on the caller's thread) every bucket is exchanged at the cut.
 *
 * The engines know this layer only as the tg_exchange of engine.h, and it
 * calls nothing above it: the session passes in what it needs (the
 * thread's setup, the engine, the training position). */
#ifndef TG_DP_H
#define TG_DP_H

#include <pthread.h>

#include "../engine.h"

/* A bucket: segments seg[seg0 .. seg0 + n_seg), floats pack[at .. at + n);
 * ready: the turn after which nothing before the cut touches them. */
typedef struct {
    int seg0, n_seg;
    int64_t at, n;
    int ready;
} tg_dp_bucket;

struct tg_dp {
    tg_exchange ex; /* what the engine sees: the segments, the pack, the hooks (first: ex is the tg_dp) */
    tg_comm *comm;
    int cut;
    tg_exchange_seg *seg;
    tg_dp_bucket *bk; /* the last one is the tail: the loss (when it has memory to write) and the statuses */
    int n_bk;
    int64_t n_pack; /* the statuses: pack[ex.status_at + rank] */
    uint64_t signature;        /* params, optimizer, state and exchange layout: each rank's must be rank 0's */
    int64_t step;              /* the step running (set by the session), for messages */
    /* one step */
    char *const *arena; /* host arenas (CPU): the exchange packs and unpacks; NULL: the engine does (WebGPU) */
    int posted;         /* buckets handed to the thread */
    /* the thread that overlaps the all-reduces with the backward */
    bool threaded;
    void (*thread_setup)(void);
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    bool quit;
    tg_status err;
    char msg[640];
    tg_comm_stats stats; /* exposed_s is ex.exposed_s */
};
typedef struct tg_dp tg_dp;

/* The exchange for program p (planned, fused) of a session with optimizer o;
 * overlap: the engine reports its turns (reached) and owns host arenas, and
 * the all-reduces may run on a thread of the exchange's, which first calls
 * thread_setup (NULL: nothing) to take the mode the engine's kernels run in. */
tg_status tg_dp_new(tg_comm *comm, const tg_program *p, const tg_optim *o, bool overlap, void (*thread_setup)(void),
                    tg_dp **out);
/* The tg_dp behind a program's exchange (p->dp), NULL for none. */
tg_dp *tg_dp_of(tg_exchange *x);
/* The exchange's counters so far. */
tg_comm_stats tg_dp_stats(const tg_dp *dp);

/* Session-level (agree.c). A comm that can be called at all: TG_ERR_ARG otherwise. */
tg_status tg_dp_check_comm(const tg_comm *c, const char *api);
/* Every rank's status: TG_OK when every rank passed TG_OK as mine; else an
 * error on every rank, its own (message kept) where mine failed, else the
 * message of the first rank that failed. */
tg_status tg_dp_agree(tg_comm *c, tg_status mine, const char *api);
/* The status an exchange's tail carried (statuses[r]: rank r's), as tg_dp_agree decides it. */
tg_status tg_dp_verdict(tg_comm *c, const float *statuses, tg_status mine, const char *mine_msg, const char *api);
/* After a compile of p that gave this rank st (p NULL when it failed):
 * every rank checks its program against rank 0's and they agree. */
tg_status tg_dp_agree_program(tg_comm *c, const tg_program *p, tg_status st, const char *api);
/* A training position: what rank 0 sends with its params. */
typedef struct {
    uint64_t seed;
    int64_t step, lr_start;
} tg_dp_position;
/* Rank 0's position, params (e's params arena) and optimizer state (p's
 * state leaves), to every rank. */
tg_status tg_dp_sync(tg_comm *c, tg_engine *e, tg_program *p, tg_dp_position *pos, const char *api);
#endif
