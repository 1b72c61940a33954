/* libtensorgrad_mpi: tg_comm over an MPI communicator (tensorgrad_mpi.h).
 * Built by the Makefile only where mpicc is found; the core library knows
 * nothing of MPI.
 *
 * Every call has a deadline (the comm's timeout_s): its messages and
 * collectives are nonblocking, and the rank waits for them by testing,
 * first in a tight loop (the others are usually there within a
 * millisecond), then with sleeps that double up to half a millisecond, so
 * a rank that waits for a stalled one does not spin a core. Past the
 * deadline it asks every other rank which call it is in (the ranks answer
 * while they wait) and fails with TG_ERR_TIMEOUT, naming those that did
 * not answer from the same call. The comm has failed then: every later
 * call fails at once, and tg_mpi_comm_failed says so (MPI_Finalize would
 * wait for the missing rank; end the job with MPI_Abort). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorgrad_mpi.h"

typedef struct {
    MPI_Comm comm;
    float *tmp; /* the ring's receive buffer, or the small all-gather's */
    size_t tmp_n;
    uint64_t call;   /* calls this rank has made: the same sequence on every rank */
    bool waiting;    /* inside a call (what a "where are you" query is told) */
    bool failed;     /* a call failed or timed out: the ranks are out of step */
    uint64_t *reply; /* per rank: the answer sent to its last query (it must live until sent) */
    MPI_Request *reply_req;
    /* after a timeout: the question asked and the answers (they must live
     * as long as the requests, which are abandoned with the comm) */
    uint64_t asked, *answer;
} mpi_impl;

/* Tags of the ring's two phases, and of the questions a rank that timed
 * out asks the others ("which call are you in?") and their answers. */
enum { TAG_SCATTER = 1, TAG_GATHER = 2, TAG_QUERY = 0x7451, TAG_ANSWER = 0x7452 };

#define SPIN_S 1e-3      /* test without sleeping for this long after the last progress */
#define MAX_SLEEP_NS 500000
#define DEFAULT_TIMEOUT_S 600.0

/* Below this many floats per rank the all-gather (one collective, R times
 * the data) beats the ring's 2 (R - 1) messages. */
#define SMALL_FLOATS 4096
/* Pieces of at most this many floats keep every MPI count an int. */
#define PIECE_FLOATS ((int64_t)1 << 28)

static tg_status mpi_fail(tg_comm *c, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(c->error, sizeof c->error, "%.60s: %.190s", what, s);
    return TG_ERR_BACKEND;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Answers the queries of ranks that timed out: the call this rank is in
 * (its number, or 0 when it is in none). An answer's buffer lives until
 * the send completes; a rank asking again before then gets no answer. */
static void answer_queries(tg_comm *c, mpi_impl *m) {
    for (;;) {
        int flag = 0;
        MPI_Status s;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, m->comm, &flag, &s) != MPI_SUCCESS || !flag) return;
        uint64_t q;
        if (MPI_Recv(&q, 1, MPI_UINT64_T, s.MPI_SOURCE, TAG_QUERY, m->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
        int r = s.MPI_SOURCE, done = 1;
        if (r < 0 || r >= c->size) continue;
        if (m->reply_req[r] != MPI_REQUEST_NULL) MPI_Test(&m->reply_req[r], &done, MPI_STATUS_IGNORE);
        if (!done) continue;
        m->reply[r] = m->waiting ? m->call : 0;
        MPI_Isend(&m->reply[r], 1, MPI_UINT64_T, r, TAG_ANSWER, m->comm, &m->reply_req[r]);
    }
}

/* Sleeps ns, at most until the deadline. */
static void nap(long ns, double deadline) {
    double left = deadline - now_s();
    if (left <= 0) return;
    if (left < ns * 1e-9) ns = (long)(left * 1e9) + 1;
    struct timespec t = {0, ns};
    nanosleep(&t, NULL);
}

/* Past the deadline of call `what`: asks every other rank which call it is
 * in, waits a moment for the answers, and fails naming the ranks that are
 * not in this one. The requests left open are abandoned with the comm. */
static tg_status timed_out(tg_comm *c, mpi_impl *m, const char *what, double waited, double timeout) {
    int R = c->size;
    m->failed = true;
    uint64_t *ans = m->answer, q = m->asked = m->call;
    MPI_Request *rq = malloc(sizeof *rq * 2 * (size_t)R);
    if (!rq) {
        snprintf(c->error, sizeof c->error, "timed out after %.3g s in %.60s (out of memory asking which ranks are "
                 "missing)", waited, what);
        return TG_ERR_TIMEOUT;
    }
    for (int r = 0; r < R; r++) {
        rq[2 * r] = rq[2 * r + 1] = MPI_REQUEST_NULL;
        if (r == c->rank) continue;
        ans[r] = 0;
        MPI_Isend(&m->asked, 1, MPI_UINT64_T, r, TAG_QUERY, m->comm, &rq[2 * r]);
        MPI_Irecv(&ans[r], 1, MPI_UINT64_T, r, TAG_ANSWER, m->comm, &rq[2 * r + 1]);
    }
    /* Long enough for ranks whose own deadline comes a little later to ask
     * and answer too; short beside the timeout. */
    double grace = timeout / 10 < 1 ? 1 : timeout / 10 > 3 ? 3 : timeout / 10, end = now_s() + grace;
    int answered = 0;
    while (answered < R - 1 && now_s() < end) {
        answer_queries(c, m);
        for (int r = 0; r < R; r++) {
            int done = 0;
            if (r == c->rank || rq[2 * r + 1] == MPI_REQUEST_NULL) continue;
            MPI_Test(&rq[2 * r + 1], &done, MPI_STATUS_IGNORE);
            if (done) answered++;
            else continue;
        }
        nap(1000000, end);
    }
    char list[96] = "";
    int missing = 0, first = -1;
    size_t o = 0;
    for (int r = 0; r < R; r++) {
        bool here = r == c->rank || (rq[2 * r + 1] == MPI_REQUEST_NULL && ans[r] == q);
        if (here) continue;
        if (first < 0) first = r;
        missing++;
        if (o + 16 < sizeof list) o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", o ? ", " : "", r);
        else if (o + 5 < sizeof list) o += (size_t)snprintf(list + o, sizeof list - o, ", ...");
    }
    for (int r = 0; r < 2 * R; r++) /* the answers that never came, and the questions never taken */
        if (rq[r] != MPI_REQUEST_NULL) {
            if (r & 1) MPI_Cancel(&rq[r]);
            MPI_Request_free(&rq[r]);
        }
    free(rq);
    if (missing == 0)
        snprintf(c->error, sizeof c->error, "timed out after %.3g s in %.60s, though every rank answered from this "
                 "call (a slow network?)", waited, what);
    else
        snprintf(c->error, sizeof c->error, "timed out after %.3g s in %.60s: rank%s %.96s of %d did not arrive",
                 waited, what, missing > 1 ? "s" : "", list, R);
    return TG_ERR_TIMEOUT;
}

/* Waits for n requests until the deadline, answering queries, testing in
 * a tight loop for SPIN_S after the last progress and then backing off. */
static tg_status wait_all(tg_comm *c, mpi_impl *m, MPI_Request *req, int n, const char *what, double start,
                          double timeout) {
    double deadline = start + timeout, last = now_s();
    long sleep_ns = 0;
    int idx[4];
    for (;;) {
        int out = 0;
        int rc = MPI_Testsome(n, req, &out, idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return m->failed = true, mpi_fail(c, rc, what);
        if (out == MPI_UNDEFINED) return TG_OK; /* every request done */
        double t = now_s();
        if (out > 0) last = t, sleep_ns = 0;
        answer_queries(c, m);
        if (t >= deadline) return timed_out(c, m, what, t - start, timeout);
        if (t - last < SPIN_S) continue;
        sleep_ns = sleep_ns ? (sleep_ns * 2 > MAX_SLEEP_NS ? MAX_SLEEP_NS : sleep_ns * 2) : 20000;
        nap(sleep_ns, deadline);
    }
}

static bool grow(mpi_impl *m, size_t n) {
    if (m->tmp_n >= n) return true;
    float *t = realloc(m->tmp, n * sizeof(float));
    if (!t) return false;
    m->tmp = t, m->tmp_n = n;
    return true;
}

/* Chunk k of n floats split R ways. */
static int64_t chunk_at(int64_t n, int R, int k) { return n * k / R; }

/* Ring all-reduce of x[0..n): R - 1 steps of reduce-scatter leave rank r
 * holding the whole sum of chunk (r + 1) % R, added in the order
 * x_c + x_{c+1} + ... around the ring from rank c; R - 1 steps of
 * all-gather then copy each finished chunk to every rank. */
/* One step of the ring: send `sn` floats at `sb` right, receive `rn` into `rb` from the left. */
static tg_status ring_step(tg_comm *c, mpi_impl *m, float *sb, int64_t sn, float *rb, int64_t rn, int tag,
                           const char *what, double start, double timeout) {
    int R = c->size, right = (c->rank + 1) % R, left = (c->rank + R - 1) % R;
    MPI_Request req[2];
    int rc = MPI_Irecv(rb, (int)rn, MPI_FLOAT, left, tag, m->comm, &req[0]);
    if (rc != MPI_SUCCESS) return m->failed = true, mpi_fail(c, rc, what);
    if ((rc = MPI_Isend(sb, (int)sn, MPI_FLOAT, right, tag, m->comm, &req[1])) != MPI_SUCCESS) {
        MPI_Cancel(&req[0]);
        MPI_Request_free(&req[0]);
        return m->failed = true, mpi_fail(c, rc, what);
    }
    tg_status st = wait_all(c, m, req, 2, what, start, timeout);
    if (st != TG_OK && req[0] != MPI_REQUEST_NULL) { /* nothing lands in rb after the call gave up */
        MPI_Cancel(&req[0]);
        MPI_Request_free(&req[0]);
    }
    return st;
}

static tg_status ring(tg_comm *c, mpi_impl *m, float *x, int64_t n, double start, double timeout) {
    int R = c->size, r = c->rank;
    if (!grow(m, (size_t)(n / R + 1))) return snprintf(c->error, sizeof c->error, "out of memory"), TG_ERR_NOMEM;
    for (int s = 0; s < R - 1; s++) {
        int send = (r - s + R) % R, recv = (r - s - 1 + 2 * R) % R;
        int64_t s0 = chunk_at(n, R, send), s1 = chunk_at(n, R, send + 1);
        int64_t r0 = chunk_at(n, R, recv), r1 = chunk_at(n, R, recv + 1);
        tg_status st = ring_step(c, m, x + s0, s1 - s0, m->tmp, r1 - r0, TAG_SCATTER, "MPI_Isend/MPI_Irecv (the "
                                 "ring's reduce-scatter)", start, timeout);
        if (st != TG_OK) return st;
        for (int64_t i = r0; i < r1; i++) x[i] = m->tmp[i - r0] + x[i];
    }
    for (int s = 0; s < R - 1; s++) {
        int send = (r + 1 - s + R) % R, recv = (r - s + R) % R;
        int64_t s0 = chunk_at(n, R, send), s1 = chunk_at(n, R, send + 1);
        int64_t r0 = chunk_at(n, R, recv), r1 = chunk_at(n, R, recv + 1);
        tg_status st = ring_step(c, m, x + s0, s1 - s0, x + r0, r1 - r0, TAG_GATHER, "MPI_Isend/MPI_Irecv (the ring's "
                                 "all-gather)", start, timeout);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* Small buffers: every rank gathers every rank's x and adds them in rank order. */
static tg_status gather_sum(tg_comm *c, mpi_impl *m, float *x, int64_t n, double start, double timeout) {
    int R = c->size;
    if (!grow(m, (size_t)(n * R))) return snprintf(c->error, sizeof c->error, "out of memory"), TG_ERR_NOMEM;
    MPI_Request req;
    int rc = MPI_Iallgather(x, (int)n, MPI_FLOAT, m->tmp, (int)n, MPI_FLOAT, m->comm, &req);
    if (rc != MPI_SUCCESS) return m->failed = true, mpi_fail(c, rc, "MPI_Iallgather");
    tg_status st = wait_all(c, m, &req, 1, "MPI_Iallgather", start, timeout);
    if (st != TG_OK) return st;
    for (int64_t i = 0; i < n; i++) {
        float s = m->tmp[i];
        for (int k = 1; k < R; k++) s = s + m->tmp[(int64_t)k * n + i];
        x[i] = s;
    }
    return TG_OK;
}

/* A call starts: refused once the comm has failed; else numbered (every
 * rank numbers its calls alike) and its clock started. */
static tg_status begin_call(tg_comm *c, mpi_impl *m, double *start, double *timeout) {
    if (m->failed) {
        snprintf(c->error, sizeof c->error, "an earlier call on this communicator failed or timed out, so the ranks "
                 "are out of step: end the job (MPI_Abort)");
        return TG_ERR_STATE;
    }
    m->call++;
    m->waiting = true;
    *start = now_s();
    *timeout = c->timeout_s > 0 ? c->timeout_s : DEFAULT_TIMEOUT_S;
    return TG_OK;
}

static tg_status end_call(mpi_impl *m, tg_status st) {
    m->waiting = false;
    return st;
}

static tg_status allreduce(tg_comm *c, float *x, int64_t n) {
    mpi_impl *m = c->impl;
    if (n < 0 || (n > 0 && !x)) return snprintf(c->error, sizeof c->error, "bad buffer"), TG_ERR_ARG;
    if (c->size == 1 || n == 0) return TG_OK;
    double start, timeout;
    tg_status st = begin_call(c, m, &start, &timeout);
    if (st != TG_OK) return st;
    if (n <= SMALL_FLOATS) return end_call(m, gather_sum(c, m, x, n, start, timeout));
    for (int64_t at = 0; at < n && st == TG_OK; at += PIECE_FLOATS)
        st = ring(c, m, x + at, n - at < PIECE_FLOATS ? n - at : PIECE_FLOATS, start, timeout);
    return end_call(m, st);
}

static tg_status broadcast(tg_comm *c, void *data, int64_t bytes, int root) {
    mpi_impl *m = c->impl;
    if (bytes < 0 || (bytes > 0 && !data) || root < 0 || root >= c->size)
        return snprintf(c->error, sizeof c->error, "bad buffer or root"), TG_ERR_ARG;
    if (c->size == 1) return TG_OK;
    double start, timeout;
    tg_status st = begin_call(c, m, &start, &timeout);
    for (int64_t at = 0; at < bytes && st == TG_OK; at += INT_MAX / 2) {
        int64_t k = bytes - at < INT_MAX / 2 ? bytes - at : INT_MAX / 2;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)data + at, (int)k, MPI_BYTE, root, m->comm, &req);
        if (rc != MPI_SUCCESS) st = (m->failed = true, mpi_fail(c, rc, "MPI_Ibcast"));
        else st = wait_all(c, m, &req, 1, "MPI_Ibcast", start, timeout);
    }
    return end_call(m, st);
}

tg_comm *tg_mpi_comm(MPI_Comm comm) {
    int init = 0, fin = 0, level = MPI_THREAD_SINGLE;
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init || MPI_Finalized(&fin) != MPI_SUCCESS || fin ||
        comm == MPI_COMM_NULL)
        return NULL;
    tg_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    int size = 0;
    if (!c || !m || MPI_Comm_size(comm, &size) != MPI_SUCCESS || size < 1 ||
        !(m->reply = calloc((size_t)size, sizeof *m->reply)) ||
        !(m->reply_req = malloc(sizeof *m->reply_req * (size_t)size)) ||
        !(m->answer = calloc((size_t)size, sizeof *m->answer)) || MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS) {
        if (m) free(m->reply), free(m->reply_req), free(m->answer);
        free(c), free(m);
        return NULL;
    }
    for (int r = 0; r < size; r++) m->reply_req[r] = MPI_REQUEST_NULL;
    /* Errors come back as codes (and into c->error), never abort the job from here. */
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    MPI_Query_thread(&level);
    c->concurrent = level >= MPI_THREAD_SERIALIZED;
    c->timeout_s = DEFAULT_TIMEOUT_S;
    c->allreduce_sum_f32 = allreduce;
    c->broadcast = broadcast;
    c->impl = m;
    return c;
}

bool tg_mpi_comm_failed(const tg_comm *c) { return c && c->impl && ((const mpi_impl *)c->impl)->failed; }

void tg_mpi_comm_free(tg_comm *c) {
    if (!c) return;
    mpi_impl *m = c->impl;
    int fin = 0;
    /* A failed comm has requests open (answers, messages to a missing
     * rank): freeing it would wait for them. Its handle is left to the job's end. */
    if (m && !m->failed && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) {
        for (int r = 0; r < c->size; r++)
            if (m->reply_req[r] != MPI_REQUEST_NULL) MPI_Wait(&m->reply_req[r], MPI_STATUS_IGNORE);
        MPI_Comm_free(&m->comm);
    }
    if (m) free(m->tmp), free(m->reply), free(m->reply_req), free(m->answer);
    free(m);
    free(c);
}
