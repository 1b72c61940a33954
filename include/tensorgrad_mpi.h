/* libtensorgrad_mpi: a tensorgrad communicator (tg_comm) over MPI, for
 * data-parallel training (docs/distributed.md). Link with -ltensorgrad_mpi
 * -ltensorgrad and your MPI (mpicc does the last), or pkg-config
 * tensorgrad_mpi.
 *
 *   MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
 *   tg_comm *comm = tg_mpi_comm(MPI_COMM_WORLD);
 *   spec.comm = comm;                 every rank: the same spec
 *   tg_session_new(&spec, &s);        rank 0's params go to every rank
 *   ... steps, each rank fed its own share of the batch ...
 *   tg_session_free(s);
 *   tg_mpi_comm_free(comm);
 *   MPI_Finalize();
 *
 * The all-reduce is a ring (reduce-scatter, then all-gather) over
 * nonblocking sends and receives, or for small buffers an all-gather summed
 * in rank order: either way each sum has one order of addition fixed by the
 * number of ranks, and every rank receives the same bits (MPI_Allreduce
 * promises neither). Every call gives up after the comm's timeout_s (600 s
 * unless set; tg-mpi's --dp-timeout), naming the ranks that did not arrive;
 * a waiting rank sleeps rather than spins once the others are late. */
#ifndef TENSORGRAD_MPI_H
#define TENSORGRAD_MPI_H

#include <mpi.h>

#include "tensorgrad.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Built with hidden visibility, as libtensorgrad: these three are its API. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* A communicator over a duplicate of comm (MPI_Comm_dup: call it on every
 * rank of comm, after MPI_Init or MPI_Init_thread). It is concurrent (the
 * CPU backend overlaps the all-reduce with the backward from a thread of
 * its own) when MPI was initialized with MPI_THREAD_SERIALIZED or more.
 * NULL when MPI is not initialized, comm is MPI_COMM_NULL, or memory runs
 * out. */
tg_comm *tg_mpi_comm(MPI_Comm comm);
/* Frees it (MPI_Comm_free of the duplicate: call it on every rank, before
 * MPI_Finalize). NULL is ignored. */
void tg_mpi_comm_free(tg_comm *c);
/* True once a call on it has failed or timed out (TG_ERR_TIMEOUT: a rank
 * did not arrive within timeout_s). The ranks are out of step then and
 * every later call fails at once; MPI_Finalize would wait for the missing
 * rank, so end the job with MPI_Abort(MPI_COMM_WORLD, 1) instead, which
 * makes mpirun stop every rank. */
bool tg_mpi_comm_failed(const tg_comm *c);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif
