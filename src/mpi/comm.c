/* libtensorgrad_mpi: tg_comm over an MPI communicator (tensorgrad_mpi.h).
 * Built by the Makefile only where mpicc is found; the core library knows
 * nothing of MPI. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorgrad_mpi.h"

typedef struct {
    MPI_Comm comm;
    float *tmp; /* the ring's receive buffer, or the small all-gather's */
    size_t tmp_n;
} mpi_impl;

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
static tg_status ring(tg_comm *c, mpi_impl *m, float *x, int64_t n) {
    int R = c->size, r = c->rank, right = (r + 1) % R, left = (r + R - 1) % R;
    if (!grow(m, (size_t)(n / R + 1))) return snprintf(c->error, sizeof c->error, "out of memory"), TG_ERR_NOMEM;
    for (int s = 0; s < R - 1; s++) {
        int send = (r - s + R) % R, recv = (r - s - 1 + 2 * R) % R;
        int64_t s0 = chunk_at(n, R, send), s1 = chunk_at(n, R, send + 1);
        int64_t r0 = chunk_at(n, R, recv), r1 = chunk_at(n, R, recv + 1);
        int rc = MPI_Sendrecv(x + s0, (int)(s1 - s0), MPI_FLOAT, right, 1, m->tmp, (int)(r1 - r0), MPI_FLOAT, left, 1,
                              m->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Sendrecv (reduce-scatter)");
        for (int64_t i = r0; i < r1; i++) x[i] = m->tmp[i - r0] + x[i];
    }
    for (int s = 0; s < R - 1; s++) {
        int send = (r + 1 - s + R) % R, recv = (r - s + R) % R;
        int64_t s0 = chunk_at(n, R, send), s1 = chunk_at(n, R, send + 1);
        int64_t r0 = chunk_at(n, R, recv), r1 = chunk_at(n, R, recv + 1);
        int rc = MPI_Sendrecv(x + s0, (int)(s1 - s0), MPI_FLOAT, right, 2, x + r0, (int)(r1 - r0), MPI_FLOAT, left, 2,
                              m->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Sendrecv (all-gather)");
    }
    return TG_OK;
}

/* Small buffers: every rank gathers every rank's x and adds them in rank order. */
static tg_status gather_sum(tg_comm *c, mpi_impl *m, float *x, int64_t n) {
    int R = c->size;
    if (!grow(m, (size_t)(n * R))) return snprintf(c->error, sizeof c->error, "out of memory"), TG_ERR_NOMEM;
    int rc = MPI_Allgather(x, (int)n, MPI_FLOAT, m->tmp, (int)n, MPI_FLOAT, m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Allgather");
    for (int64_t i = 0; i < n; i++) {
        float s = m->tmp[i];
        for (int k = 1; k < R; k++) s = s + m->tmp[(int64_t)k * n + i];
        x[i] = s;
    }
    return TG_OK;
}

static tg_status allreduce(tg_comm *c, float *x, int64_t n) {
    mpi_impl *m = c->impl;
    if (n < 0 || (n > 0 && !x)) return snprintf(c->error, sizeof c->error, "bad buffer"), TG_ERR_ARG;
    if (c->size == 1 || n == 0) return TG_OK;
    if (n <= SMALL_FLOATS) return gather_sum(c, m, x, n);
    for (int64_t at = 0; at < n; at += PIECE_FLOATS) {
        tg_status st = ring(c, m, x + at, n - at < PIECE_FLOATS ? n - at : PIECE_FLOATS);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

static tg_status broadcast(tg_comm *c, void *data, int64_t bytes, int root) {
    mpi_impl *m = c->impl;
    if (bytes < 0 || (bytes > 0 && !data) || root < 0 || root >= c->size)
        return snprintf(c->error, sizeof c->error, "bad buffer or root"), TG_ERR_ARG;
    for (int64_t at = 0; at < bytes; at += INT_MAX / 2) {
        int64_t k = bytes - at < INT_MAX / 2 ? bytes - at : INT_MAX / 2;
        int rc = MPI_Bcast((char *)data + at, (int)k, MPI_BYTE, root, m->comm);
        if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Bcast");
    }
    return TG_OK;
}

tg_comm *tg_mpi_comm(MPI_Comm comm) {
    int init = 0, fin = 0, level = MPI_THREAD_SINGLE;
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init || MPI_Finalized(&fin) != MPI_SUCCESS || fin ||
        comm == MPI_COMM_NULL)
        return NULL;
    tg_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m || MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS) {
        free(c), free(m);
        return NULL;
    }
    /* Errors come back as codes (and into c->error), never abort the job from here. */
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    MPI_Query_thread(&level);
    c->concurrent = level >= MPI_THREAD_SERIALIZED;
    c->allreduce_sum_f32 = allreduce;
    c->broadcast = broadcast;
    c->impl = m;
    return c;
}

void tg_mpi_comm_free(tg_comm *c) {
    if (!c) return;
    mpi_impl *m = c->impl;
    int fin = 0;
    if (m && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Comm_free(&m->comm);
    if (m) free(m->tmp);
    free(m);
    free(c);
}
