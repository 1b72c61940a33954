/* A data-parallel program built against the installed tree through
 * pkg-config tensorgrad_mpi: run alone (MPI's singleton) it trains the
 * consumer's tiny model over a communicator of one rank. */
#include <mpi.h>
#include <stdio.h>

#include <tensorgrad_mpi.h>

static tg_tensor loss_fn(tg_graph *g, void *user) {
    tg_linear *l = user;
    return tg_mse(tg_linear_fwd(g, l, tg_input(g, "x")), tg_input(g, "y"));
}

int main(int argc, char **argv) {
    int level;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &level);
    tg_comm *comm = tg_mpi_comm(MPI_COMM_WORLD);
    tg_model *m = tg_model_new();
    tg_linear l = tg_linear_new(m, "l", 1, 1, true);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 1)}, {"y", TG_F32, TG_SHAPE(8, 1)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &l, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(5e-2f)), .comm = comm};
    tg_session *s = NULL;
    float x[8], y[8], loss = 1;
    for (int i = 0; i < 8; i++) x[i] = (float)i / 8, y[i] = 3 * x[i] + 1;
    tg_status st = comm ? tg_session_new(&spec, &s) : TG_ERR_BACKEND;
    for (int step = 0; step < 300 && st == TG_OK; step++)
        st = tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 8), TG_FEED("y", y, 8)}, 2, &loss);
    if (st != TG_OK) printf("error: %s\n", comm ? tg_last_error() : "tg_mpi_comm failed");
    else printf("tensorgrad %s loss %g\n", tg_version(), loss);
    tg_session_free(s);
    tg_model_free(m);
    tg_mpi_comm_free(comm);
    MPI_Finalize();
    return st == TG_OK && loss < 1e-2f ? 0 : 1;
}
